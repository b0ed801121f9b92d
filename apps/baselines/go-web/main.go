// go-web — the web benchmark's Go peer: Go's own net/http server (a
// goroutine per connection on the Go scheduler and its netpoller), answering
// the benchmark's routes with the same body and headers as the loom server:
// GET|HEAD /plaintext and / → "Hello, World!" as text/plain with Server,
// Date (net/http adds it) and Content-Length; anything else 404. Standard
// library only; built offline by scripts/bench (GOPROXY=off, no modules).
//
//	go-web [-port N] [-address A]
//
// GOMAXPROCS (environment) sets how many threads run goroutines; the
// benchmark sets it to the CPUs the server is given.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
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
	flag.Parse()
	if flag.NArg() > 0 || *port < 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "usage: go-web [-port N] [-address A]")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*address, strconv.Itoa(*port)))
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
