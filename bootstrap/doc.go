// Package bootstrap is goccl's rendezvous: it finds out who is who (rank,
// size, local rank, where the store is and which secret proves membership)
// from the environment a launcher set, and lets the ranks meet and exchange
// small blobs (transport addresses) through a small authenticated TCP
// key-value store. It knows nothing of collectives or transports.
//
// # Environment
//
// FromEnv recognises, in this order of precedence:
//
//   - gorun: GOCCL_RANK, GOCCL_SIZE, GOCCL_LOCAL_RANK, GOCCL_LOCAL_SIZE,
//     GOCCL_BOOTSTRAP (host:port of the store gorun hosts), GOCCL_SECRET.
//   - torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT. Rank 0 hosts the store on MASTER_ADDR:MASTER_PORT. When
//     TORCHELASTIC_USE_AGENT_STORE is true, torchrun's own store already
//     holds MASTER_PORT, and goccl uses MASTER_PORT+1.
//   - Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE. When every rank
//     is local the store is on 127.0.0.1; otherwise MASTER_ADDR (or
//     GOCCL_BOOTSTRAP) must name rank 0's host. The port is MASTER_PORT or
//     derived from PMIX_NAMESPACE.
//   - Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//     SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE
//     (or SLURM_TASKS_PER_NODE). The store host is the first node of the
//     node list (where task 0 runs under Slurm's block and cyclic
//     distributions); MASTER_ADDR overrides it. The port is MASTER_PORT or
//     derived from SLURM_JOB_ID and SLURM_STEP_ID.
//
// Open MPI is checked before Slurm because mpirun inside an allocation
// inherits the batch script's SLURM_PROCID=0; the launcher that started the
// process directly wins. A derived port is 20000 + FNV-1a(job id) % 12768,
// the same on every rank of the job and below Linux's default ephemeral
// range (32768-60999), where the local ends of connections would take it. GOCCL_BOOTSTRAP (host:port) always
// overrides the store address. When no launcher is found FromEnv returns an
// error wrapping ErrNoLauncher.
//
// # Secret
//
// Every connection to the store proves knowledge of a shared secret. It is
// taken from GOCCL_SECRET (hex), else from the file named by
// GOCCL_SECRET_FILE (hex text), else from $HOME/.goccl/secret (hex text).
// When none exists, the rank that hosts the store creates
// $HOME/.goccl/secret with 32 random bytes: mode 0600, written to a
// temporary file and linked into place, so that it appears whole and at most
// once even when several processes race. The other ranks wait for it to
// appear, for at most SecretWait (GOCCL_SECRET_WAIT overrides, as a Go
// duration). This works when the ranks share a home directory (one host, or
// a shared file system); elsewhere set GOCCL_SECRET or distribute the file.
//
// A rank whose secret differs is refused (its Connect fails with ErrAuth)
// and cannot tell the others, which wait for it until their deadline. The
// store counts such refusals, with the address of the last, and a wait of
// Allgather or Barrier that ends at its deadline says so in its error.
//
// # Store protocol
//
// Frames are versioned and length-prefixed (see frame.go). A connection
// first runs a mutual challenge-response: client and server each send a
// random nonce, the client proves knowledge of the secret with
// HMAC-SHA256(secret, "client" | cnonce | snonce), the server answers with
// HMAC-SHA256(secret, "server" | cnonce | snonce). The secret itself never
// travels. Frames after the handshake are not encrypted or individually
// authenticated: the store defends against stray and mistaken connections,
// not an active attacker on the path.
//
// A client may leave wills (Client.Will): keys the store sets when the
// connection ends without a bye, which Client.Close sends first. A killed
// process, or a host or link that failed (found by keepalive), sets its
// wills; the ranks that wait for it watch them.
//
// This package may import only the standard library and golang.org/x/sys.
package bootstrap
