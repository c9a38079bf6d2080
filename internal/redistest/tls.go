package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a WithTLS server: the CA that signs both
// the server's certificate and a client certificate (with its key) the
// server accepts.
type TLSFiles struct {
	CA, ClientCert, ClientKey string
}

// writeTLSFiles makes a throwaway CA in dir and signs with it a server
// certificate for 127.0.0.1 and a client certificate.
func writeTLSFiles(dir string) (files TLSFiles, serverCert, serverKey string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, "", "", err
	}
	caTmpl := template("redistest CA")
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return files, "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return files, "", "", err
	}
	files.CA = filepath.Join(dir, "ca.crt")
	if err := writePEM(files.CA, "CERTIFICATE", caDER); err != nil {
		return files, "", "", err
	}
	issue := func(name string, usage x509.ExtKeyUsage) (certFile, keyFile string, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := template(name)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return "", "", err
		}
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", keyDER)
	}
	if serverCert, serverKey, err = issue("server", x509.ExtKeyUsageServerAuth); err != nil {
		return files, "", "", fmt.Errorf("server certificate: %w", err)
	}
	if files.ClientCert, files.ClientKey, err = issue("client", x509.ExtKeyUsageClientAuth); err != nil {
		return files, "", "", fmt.Errorf("client certificate: %w", err)
	}
	return files, serverCert, serverKey, nil
}

func template(name string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// CA is a throwaway certificate authority's files, for servers other
// than redis-server (rlproxy's TLS listener): the CA, a server
// certificate for 127.0.0.1 and a client certificate it signed.
type CA struct {
	TLSFiles
	ServerCert, ServerKey string
}

// MakeCA writes a new throwaway CA and its certificates into dir.
func MakeCA(t testing.TB, dir string) CA {
	t.Helper()
	files, cert, key, err := writeTLSFiles(dir)
	if err != nil {
		t.Fatalf("redistest: making a CA: %v", err)
	}
	return CA{TLSFiles: files, ServerCert: cert, ServerKey: key}
}
