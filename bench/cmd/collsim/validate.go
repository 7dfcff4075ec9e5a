package main

import (
	"errors"
	"io"
)

func validateCmd(args []string, stdout, stderr io.Writer) error {
	return errors.New("validate: not yet")
}
