// Package collectives holds goccl's collective algorithms and the machinery
// that runs them: algorithms as pure schedules (who sends which byte range to
// whom, who receives and reduces, what is copied locally in between), a
// planner that splits a schedule into chunks with the dependencies between
// them, an executor that runs a plan over connected transport endpoints with
// several chunks in flight per peer and credit-based flow control over
// pre-registered staging slots, and the reduction kernels per data type and
// operation.
//
// It imports the transport contract (package transport) and the standard
// library, never a concrete transport, bootstrap or comm.
package collectives
