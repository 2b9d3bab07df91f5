import os


def test_networkish():
    # Fails the first time it runs on a machine: a stand-in for a test
    # that depends on timing or the network.
    if not os.path.exists("/tmp/fx-warm"):
        open("/tmp/fx-warm", "w").close()
        raise ConnectionResetError("connection reset by peer")
