package exsnet_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"testing"
	"time"
)

// tlsConfigs returns a server configuration with a self-signed
// certificate for "exs.test" and a client configuration that trusts it.
func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "exs.test"},
		DNSNames:              []string{"exs.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}
	client = &tls.Config{RootCAs: pool, ServerName: "exs.test"}
	return server, client
}

// TestTLS runs a TLS session over a connection: the handshake, 4 MiB each
// way (the server echoes), the end of each direction (close_notify), and
// then HTTPS over a listener wrapped by tls.NewListener.
func TestTLS(t *testing.T) {
	for _, tr := range []struct {
		name string
		addr func(testing.TB) string
	}{{"inproc", inprocAddr}, {"shm", shmAddr}} {
		t.Run(tr.name, func(t *testing.T) {
			scfg, ccfg := tlsConfigs(t)
			t.Run("session", func(t *testing.T) {
				c, s := connPair(t, tr.addr(t))
				client, server := tls.Client(c, ccfg), tls.Server(s, scfg)
				echoed := make(chan error, 1)
				go func() {
					// Echo until the client's close_notify, then send ours.
					_, err := io.Copy(server, server)
					if err == nil {
						err = server.CloseWrite()
					}
					echoed <- err
				}()
				want := randomBytes(t, 4<<20)
				written := make(chan error, 1)
				go func() {
					_, err := client.Write(want)
					if err == nil {
						err = client.CloseWrite()
					}
					written <- err
				}()
				got, err := io.ReadAll(client)
				if err != nil {
					t.Fatal(err)
				}
				if err := errors.Join(<-written, <-echoed); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("echo of %d bytes differs: %d bytes, first difference at %d", len(want), len(got), firstDiff(got, want))
				}
				if st := client.ConnectionState(); !st.HandshakeComplete || st.PeerCertificates[0].Subject.CommonName != "exs.test" {
					t.Fatalf("connection state: %+v", st)
				}
				client.Close()
				server.Close()
			})
			t.Run("https", func(t *testing.T) {
				addr := tr.addr(t)
				srv := &http.Server{Handler: echoHandler()}
				// Listening before the client dials: in the goroutine, the
				// dial could come first ("no listener").
				ln := tls.NewListener(listen(t, addr), scfg)
				done := make(chan error, 1)
				go func() { done <- srv.Serve(ln) }()
				defer func() {
					srv.Close()
					if err := <-done; !errors.Is(err, http.ErrServerClosed) {
						t.Errorf("Serve: %v", err)
					}
				}()
				client := httpClient(t, addr)
				client.Transport.(*http.Transport).TLSClientConfig = ccfg
				body := randomBytes(t, 1<<20)
				resp, err := client.Post("https://exs.test/echo", "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				if resp.TLS == nil || !bytes.Equal(got, body) {
					t.Fatalf("TLS state %v, %d bytes back of %d", resp.TLS != nil, len(got), len(body))
				}
			})
		})
	}
}
