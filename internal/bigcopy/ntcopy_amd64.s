//go:build amd64 && !race && !purego

#include "textflag.h"

// func ntcopy(dst, src *byte, n uintptr)
TEXT ·ntcopy(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX

loop64:
	PREFETCHNTA	0x1C0(SI)
	MOVOU	(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVNTO	X0, (DI)
	MOVNTO	X1, 16(DI)
	MOVNTO	X2, 32(DI)
	MOVNTO	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	SUBQ	$64, CX
	JNZ	loop64
	// Non-temporal stores are weakly ordered: fence them before the
	// stores that follow (a completion the reader acts on).
	SFENCE
	RET
