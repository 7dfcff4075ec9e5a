//go:build amd64

#include "textflag.h"

// func spinPause()
TEXT ·spinPause(SB), NOSPLIT, $0-0
	PAUSE
	RET
