// Command externalgrpc-interop checks that Ferroscale's externalgrpc implementations talk to Go's:
// the Go gRPC stack (HTTP/2 framing, TLS with ALPN h2, deadlines, status codes), Go's protobuf
// runtime, and the Kubernetes Go types' Node Marshal/Unmarshal that upstream's client and example
// server use for template nodes. It is test infrastructure for crates/cli/tests/externalgrpc_interop.rs,
// never part of the product.
//
//	externalgrpc-interop client --address=HOST:PORT [--cert=F --key=F --cacert=F] [--group=ID]
//	    runs a fixed sequence of calls against a server and prints a JSON report of what it saw.
//	externalgrpc-interop server --address=HOST:PORT [--cert=F --key=F --cacert=F]
//	    serves a small in-memory cloud until killed; prints "ready: listening on ADDR" first.
//
// Upstream's own client package (k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc)
// would be the natural thing to import, but the module proxy refuses every version of that module
// (HTTP 403), so the schema is compiled at start-up from externalgrpc.proto beside this file and
// messages are dynamic (dynamicpb): the bytes on the wire are produced and read by the same Go
// protobuf and gRPC libraries upstream's generated code uses.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "client":
		err = runClient(os.Args[2:])
	case "server":
		err = runServer(os.Args[2:])
	case "version":
		// build.sh runs this to check the binary before it goes into the cache.
		fmt.Println("externalgrpc-interop (schema: externalgrpc >= 1.35)")
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "externalgrpc-interop %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: externalgrpc-interop client|server --address=HOST:PORT [--cert=FILE --key=FILE --cacert=FILE]")
	os.Exit(2)
}

// tlsFlags are the three files of mutual TLS; all empty means plaintext (h2c), as in upstream's
// client config and example server.
type tlsFlags struct {
	cert, key, ca string
}

func (t *tlsFlags) register(flags *flag.FlagSet) {
	flags.StringVar(&t.cert, "cert", "", "certificate file (PEM) this side presents")
	flags.StringVar(&t.key, "key", "", "private key file (PEM) of --cert")
	flags.StringVar(&t.ca, "cacert", "", "CA bundle (PEM) that signs the other side's certificate")
}

func (t *tlsFlags) enabled() (bool, error) {
	given := 0
	for _, file := range []string{t.cert, t.key, t.ca} {
		if file != "" {
			given++
		}
	}
	switch given {
	case 0:
		return false, nil
	case 3:
		return true, nil
	default:
		return false, errors.New("--cert, --key and --cacert go together: give all three for mutual TLS, or none for plaintext")
	}
}

func (t *tlsFlags) keyPairAndPool() (tls.Certificate, *x509.CertPool, error) {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("loading --cert %s and --key %s: %w", t.cert, t.key, err)
	}
	pem, err := os.ReadFile(t.ca)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("reading --cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("--cacert %s holds no PEM certificate", t.ca)
	}
	return pair, pool, nil
}

// clientTLS is what upstream's client builds: its own certificate, only the given CAs trusted, and
// the host part of the address as the name the server certificate must carry.
func (t *tlsFlags) clientTLS(address string) (*tls.Config, error) {
	pair, pool, err := t.keyPairAndPool()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("--address %q: %w", address, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ServerName:   host,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// serverTLS is what upstream's example server builds: a client certificate signed by the CA is
// required.
func (t *tlsFlags) serverTLS() (*tls.Config, error) {
	pair, pool, err := t.keyPairAndPool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// defaultCallTimeout is upstream's default grpc_timeout.
const defaultCallTimeout = 5 * time.Second
