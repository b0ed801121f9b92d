// go-web — the web benchmark's Go peer: Go's own net/http server (a
// goroutine per connection on the Go scheduler and its netpoller), answering
// the benchmark's routes with the same body and headers as the loom server:
// GET|HEAD /plaintext and / → "Hello, World!" as text/plain with Server,
// Date (net/http adds it) and Content-Length; anything else 404. Standard
// library only; built offline by scripts/bench (GOPROXY=off, no modules).
//
//	go-web [-port N] [-address A] [-defer-accept]
//
// GOMAXPROCS (environment) sets how many threads run goroutines; the
// benchmark sets it to the CPUs the server is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

var (
	hello    = []byte("Hello, World!")
	notFound = []byte("Not Found\n")
	server   = []string{"go"}
	textType = []string{"text/plain"}
	helloLen = []string{strconv.Itoa(len(hello))}
	nfLen    = []string{strconv.Itoa(len(notFound))}
)

func handle(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Server"] = server
	h["Content-Type"] = textType
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		h["Allow"] = []string{"GET, HEAD"}
		w.WriteHeader(http.StatusMethodNotAllowed)
	case r.URL.Path == "/plaintext" || r.URL.Path == "/":
		h["Content-Length"] = helloLen
		w.Write(hello) // net/http drops the body of a HEAD answer
	default:
		h["Content-Length"] = nfLen
		w.WriteHeader(http.StatusNotFound)
		w.Write(notFound)
	}
}

func main() {
	port := flag.Int("port", 8080, "TCP port (0: any free port, printed)")
	address := flag.String("address", "127.0.0.1", "address to listen on")
	defer_ := flag.Bool("defer-accept", false, "TCP_DEFER_ACCEPT on the listening socket")
	flag.Parse()
	if flag.NArg() > 0 || *port < 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "usage: go-web [-port N] [-address A] [-defer-accept]")
		os.Exit(2)
	}
	var lc net.ListenConfig
	if *defer_ {
		// The same knob as the other servers' --defer-accept: accept a
		// connection once its first bytes are in.
		lc.Control = func(network, addr string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 1)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(*address, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-web:", err)
		os.Exit(1)
	}
	fmt.Printf("go-web: listening on http://%s/ (net/http, GOMAXPROCS=%d)\n", ln.Addr(), runtime.GOMAXPROCS(0))
	srv := &http.Server{Handler: http.HandlerFunc(handle)}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "go-web:", err)
		os.Exit(1)
	}
}
