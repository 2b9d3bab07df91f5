package cli

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"smolvm.dev/smolvm/server/httpapi"
)

func TestListenAPI(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "tcp://0.0.0.0:0"} {
		if ln, _, err := listenAPI(addr, "", "", false); err == nil || !strings.Contains(err.Error(), "--insecure") {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("%s without TLS: %v, want a refusal naming --insecure", addr, err)
		}
	}
	for _, c := range []struct {
		addr     string
		insecure bool
	}{{"127.0.0.1:0", false}, {"localhost:0", false}, {"[::1]:0", false}, {"0.0.0.0:0", true}} {
		ln, tlsOn, err := listenAPI(c.addr, "", "", c.insecure)
		if err != nil {
			if c.addr == "[::1]:0" && strings.Contains(err.Error(), "cannot assign") {
				continue // no IPv6 loopback here
			}
			t.Errorf("%s (insecure %v): %v", c.addr, c.insecure, err)
			continue
		}
		ln.Close()
		if tlsOn {
			t.Errorf("%s: TLS on without a certificate", c.addr)
		}
	}
	if _, _, err := listenAPI("0.0.0.0:0", "c.pem", "", false); err == nil {
		t.Error("--tls-cert without --tls-key accepted")
	}

	// A socket that another server answers on is not taken over; a stale
	// one is replaced, with mode 0600.
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, _, err := listenAPI("unix://"+sock, "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	if _, _, err := listenAPI("unix://"+sock, "", "", false); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("second server on a live socket: %v", err)
	}
	ln.Close()
	os.WriteFile(sock, nil, 0o600) // a stale leftover
	if ln, _, err = listenAPI("unix://"+sock, "", "", false); err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	ln.Close()
}

// TestListenAPITLS serves over TLS off loopback (the certificate's key
// and name are made here) and checks a client that trusts it gets through.
func TestListenAPITLS(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)

	ln, tlsOn, err := listenAPI("0.0.0.0:0", certFile, keyFile, false)
	if err != nil || !tlsOn {
		t.Fatalf("TLS listener: %v %v", tlsOn, err)
	}
	// As serve does: net/http's own answers in the API's shape.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || !r.TLS.HandshakeComplete {
			w.WriteHeader(http.StatusTeapot) // the request's TLS state was lost
		}
		w.Write([]byte("ok"))
	})}
	go srv.Serve(httpapi.Listener(ln, nil))
	defer srv.Close()
	pool := x509.NewCertPool()
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	port := ln.Addr().(*net.TCPAddr).Port
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("over TLS: %d %v", resp.StatusCode, resp.TLS)
	}
	// Plain HTTP to the TLS port never reaches the handler: a JSON 400.
	r, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid"`) || !strings.Contains(string(b), "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP on the TLS listener: %d %s", r.StatusCode, b)
	}
	// A request net/http cannot parse, over TLS: a JSON 400 too.
	c, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GARBAGE\r\n\r\n")
	r, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r.Body)
	if r.StatusCode != http.StatusBadRequest || r.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), "malformed HTTP request") {
		t.Fatalf("a malformed request over TLS: %d %v %s", r.StatusCode, r.Header, b)
	}
}
