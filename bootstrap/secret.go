package bootstrap

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// secretLen is the length of a secret this package creates.
const secretLen = 32

// NewSecret returns a fresh random secret.
func NewSecret() []byte {
	b := make([]byte, secretLen)
	if _, err := rand.Read(b); err != nil {
		panic("bootstrap: crypto/rand: " + err.Error())
	}
	return b
}

// parseSecret decodes a hex secret; what names its origin for errors.
func parseSecret(what, v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, fmt.Errorf("bootstrap: %s is empty", what)
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %s is not a hex string: %v", what, err)
	}
	return b, nil
}

func readSecretFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %s: %w", what, err)
	}
	return parseSecret(what+" "+path, string(b))
}

// secretFromEnv finds the secret: GOCCL_SECRET, GOCCL_SECRET_FILE, or
// $HOME/.goccl/secret, creating the latter on the hosting rank and waiting
// for it elsewhere.
func secretFromEnv(e envReader, host bool) ([]byte, error) {
	if v, ok := e.lookup("GOCCL_SECRET"); ok {
		return parseSecret("GOCCL_SECRET", v)
	}
	if v, ok := e.lookup("GOCCL_SECRET_FILE"); ok {
		if v == "" {
			return nil, fmt.Errorf("bootstrap: GOCCL_SECRET_FILE is empty")
		}
		return readSecretFile("GOCCL_SECRET_FILE", v)
	}
	home, _, ok := e.first("HOME")
	if !ok {
		return nil, fmt.Errorf("bootstrap: no secret: set GOCCL_SECRET or GOCCL_SECRET_FILE (HOME is not set either)")
	}
	wait := SecretWait
	if v, ok := e.lookup("GOCCL_SECRET_WAIT"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bootstrap: GOCCL_SECRET_WAIT=%q is not a duration", v)
		}
		wait = d
	}
	path := filepath.Join(home, ".goccl", "secret")
	if host {
		return createSecretFile(path)
	}
	return waitSecretFile(path, wait)
}

// createSecretFile returns the secret in path, creating it first if it does
// not exist. The file is written whole under a temporary name (O_EXCL, mode
// 0600) and linked into place, so readers never see it partial and a
// concurrent creator's file wins over ours.
func createSecretFile(path string) ([]byte, error) {
	b, err := readSecretFile("secret file", path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bootstrap: create secret: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".secret-*") // O_EXCL, 0600
	if err != nil {
		return nil, fmt.Errorf("bootstrap: create secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	secret := NewSecret()
	_, err = tmp.WriteString(hex.EncodeToString(secret) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap: create secret %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readSecretFile("secret file", path)
		}
		return nil, fmt.Errorf("bootstrap: create secret %s: %w", path, err)
	}
	return secret, nil
}

// waitSecretFile waits up to wait for path to appear and returns its secret.
func waitSecretFile(path string, wait time.Duration) ([]byte, error) {
	deadline := time.Now().Add(wait)
	for {
		b, err := readSecretFile("secret file", path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return b, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bootstrap: no secret: %s did not appear within %v (the rank hosting the store creates it when the ranks share a home directory; otherwise set GOCCL_SECRET or GOCCL_SECRET_FILE)", path, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
