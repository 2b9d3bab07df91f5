def slugify(text):
    """Lower-case words of text joined by dashes."""
    return "-".join(text.lower().split())
