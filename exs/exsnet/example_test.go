package exsnet_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/exsgo/exs/exs/exsnet"
)

// An HTTP echo server and its client, talking over exs: the server serves
// on an exsnet.Listener, and the client's transport dials with
// exsnet.Dial. Over "shm:PATH" instead of "inproc:NAME" the two could be
// different processes of the host.
func Example() {
	const addr = "inproc:example-http-echo"
	ln, err := exsnet.Listen(addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(body)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	tr := &http.Transport{
		// The URL's host is not an exs address: every connection goes
		// to addr.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := exsnet.Dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Post("http://echo/", "text/plain", strings.NewReader("hello over exs"))
	if err != nil {
		log.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", resp.Status, body)
	// Output: 200 OK: hello over exs
}
