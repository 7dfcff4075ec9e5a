package main

// manual is what gorun --help prints. doc.go holds the same text as the
// package documentation; a test keeps the two equal.
const manual = `NAME
    gorun - start the ranks of a goccl program on this host, on several
    hosts over ssh, or under Slurm

SYNOPSIS
    gorun [-n N] [-H host:slots,... | --hostfile FILE] [flags] prog [args...]

DESCRIPTION
    gorun starts N copies of prog, the ranks 0..N-1, hosts the bootstrap
    store they meet through, tags their output, and stops them all when one
    fails. Each rank gets the environment goccl's bootstrap package reads,
    and the names torchrun sets, so torchrun-style programs run unchanged:

        GOCCL_RANK, RANK                   this rank, 0..N-1
        GOCCL_SIZE, WORLD_SIZE             N
        GOCCL_LOCAL_RANK, LOCAL_RANK       its index among the ranks on its host
        GOCCL_LOCAL_SIZE, LOCAL_WORLD_SIZE the number of ranks on its host
        GOCCL_BOOTSTRAP                    host:port of the store gorun hosts
        GOCCL_SECRET                       hex secret that admits a rank to the store
        MASTER_ADDR, MASTER_PORT           rank 0's host, and a port (free on this
                                           host when gorun started) for it to bind

    Local ranks inherit gorun's environment. Remote ranks get only these,
    gorun's own GOCCL_* variables (GOCCL_TRANSPORT, ...) and the -x ones.

  Placement
    Without -H or --hostfile every rank runs on this host. With them, ranks
    fill the first host's slots, then the next host's, in order (mpirun's
    --map-by slot); -n defaults to the total of the slots. A host that is
    this machine (localhost, its name, or one of its addresses) runs its
    ranks directly; any other host runs them over ssh.

  Remote ranks
    gorun runs "ssh -o BatchMode=yes HOST sh -c ..." per remote rank: no
    password prompts, so set up keys first. The program path (resolved on
    this host, through PATH if it has no slash) and the working directory
    are the same as here, so the hosts must share them (a shared file
    system, or the same install paths). The environment travels over ssh's
    standard input, not on the command line. A small sh wrapper on the
    remote host runs the rank in its own session and stops it (SIGTERM,
    then SIGKILL after the grace period) when that input ends: when gorun
    stops it, exits or dies, or the ssh link drops.

    When the ssh command is OpenSSH's ("ssh"), up to 8 ranks of a host
    share one connection (ControlMaster, its socket in a private temporary
    directory), and at most 8 connections to a host are opened at once:
    sshd's defaults refuse more than 10 sessions per connection
    (MaxSessions) and drop handshakes beyond 10 at once (MaxStartups).

  Bootstrap store
    The store listens on 127.0.0.1 when every rank is local. Otherwise it
    listens on this host's address on the route to the remote hosts (on
    every interface if they are reached through different addresses), and
    every rank, local ones too, dials that address: a rank's transport
    advertises the address it reached the store from. --bootstrap-addr
    overrides the choice.

  Slurm
    Inside an allocation (SLURM_JOB_ID set, as under salloc or sbatch) and
    without -H or --hostfile, gorun starts the ranks with one
    "srun --ntasks=N --label --kill-on-bad-exit=1 --quit-on-interrupt" on
    the allocated nodes, adding --overcommit when N exceeds the
    allocation's CPUs; -n defaults to SLURM_NTASKS. srun passes SIGINT to
    the tasks and ends the step on SIGTERM in its own way. Each task runs
    gorun itself, at the same path, which sets the rank's variables from
    SLURM_PROCID and friends and execs prog. --launcher ssh (or -H) makes
    gorun start the ranks itself even inside an allocation.
    A goccl program started by srun or Open MPI's mpirun without gorun
    needs none of this: it reads SLURM_* or OMPI_COMM_WORLD_* itself.

  Output
    Every line a rank writes is copied whole to gorun's standard output or
    error (the stream it was written on), tagged with the rank: "[3] text".
    Lines of different ranks never interleave; a line longer than 64 KiB is
    split. --timestamp adds the UTC time after the tag. --output-dir DIR
    writes each rank's lines, both streams, untagged, to DIR/rank-N.log
    instead; gorun's own messages stay on its standard error. Standard
    input is not forwarded: every rank reads /dev/null (mpirun gives its
    own to rank 0); pass input as a file or arguments.

  Failure and signals
    When a rank exits non-zero or is killed, gorun stops the others, 250 ms
    later: SIGTERM to each rank's process group, SIGKILL after the grace
    period. It then prints one line naming the rank, its host and the
    cause, and the other ranks that failed in those 250 ms (peers of a dead
    rank often fail a moment after it; a rank killed by a signal is named
    first):

        gorun: rank 2 on node3 (pid 1234) killed by signal: killed; also failed: rank 0 on node1

    Otherwise the rank that the failed goccl ranks name as the root of
    their failure comes first, with their words, also when it was not the
    first to exit or never failed by itself (stopped, hung, or exited with
    status 0):

        gorun: rank 3 on node2 (pid 1240): named by ranks 0, 1, 2: stalled (stopped, hung, or not in the call the others wait in); it was still running when gorun stopped the job; first to fail: rank 1 on node1 (pid 1231) exited with status 1; also failed: rank 0 on node1, 2 on node2

    SIGINT and SIGTERM sent to gorun are forwarded to every rank (to remote
    ranks through the wrapper); a second one kills them. --timeout stops
    the whole job the same way and names the ranks still running. When the
    ranks have exited, whatever they left in their process groups is
    killed. If gorun itself is killed, local ranks get SIGKILL from the
    kernel and remote ranks are stopped by their wrappers.

OPTIONS
    -n N, -np N
        Number of ranks, 1-4096. Default: the slots of -H or --hostfile, or
        SLURM_NTASKS under Slurm; required otherwise.
    -H host[:slots],...
        Hosts and their slots (default 1 slot). A host named twice adds
        its slots.
    --hostfile FILE
        Hosts, one per line: "host" or "host slots=N"; "#" starts a comment.
    --oversubscribe
        Allow more ranks than slots: placement goes round the hosts again.
    --bind-to auto|core|none
        Bind the ranks started on this host to disjoint blocks of the CPUs
        gorun may use (mpirun's --bind-to core), so that two ranks that
        poll while they wait do not share a core. Default: $GORUN_BIND_TO,
        else $GOCCL_BIND, else auto: as core when the ranks of this host do
        not outnumber its CPUs, else each rank to one CPU, round robin (ranks
        that share a core take turns on it instead of migrating). core fails when the
        ranks outnumber the CPUs. A rank bound to k CPUs runs with
        GOMAXPROCS k unless it is set. A rank started over ssh binds itself
        the same way on its host, at comm.Init (gorun passes the mode in
        GOCCL_BIND unless that is set); srun binds the ranks it starts
        (--cpu-bind).
    -x VAR[=value]
        Set VAR for every rank, to value or to gorun's own value of VAR.
        Repeat for more variables.
    --ssh COMMAND
        The ssh command, split at spaces, for options such as
        "ssh -p 2222 -i key". Default: $GORUN_SSH, else "ssh". gorun adds
        -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3.
    --srun COMMAND
        The srun command, split at spaces, for options such as
        "srun --partition=debug". Default: $GORUN_SRUN, else "srun".
    --launcher auto|ssh|srun
        How to start ranks: srun, or directly and over ssh. Default auto:
        srun inside a Slurm allocation unless -H or --hostfile is given.
    --bootstrap-addr HOST[:PORT]
        Where the store listens and what every rank dials. A HOST of
        0.0.0.0 (or none, as in ":29400") listens everywhere and lets
        each host's ranks dial this host's address on the route to them.
    -v, --verbose
        Say where the store listens and how each rank is started.
    --timestamp
        Prefix every line with the time it arrived.
    --output-dir DIR
        Write rank N's output to DIR/rank-N.log, not to the terminal.
    --timeout D
        Stop the job after D (a Go duration: 90s, 10m) and exit 124.
    --grace D
        Time between SIGTERM and SIGKILL when stopping ranks. Default 3s.
    -h, --help
        Show this manual.

    Flags may be written with one dash or two, and end at prog.

EXIT STATUS
    0 when every rank exited 0. Otherwise the exit status of the failed
    rank the summary names first (the first to fail if the named rank did
    not fail by itself), or 128+N if signal N killed it; 128+N when gorun was stopped by
    signal N; 124 after --timeout; 2 for wrong usage; 1 when gorun could not
    start the job.

EXAMPLES
    gorun -n 4 ./allreduce -count 1048576
    gorun -H node1:8,node2:8 ./train
    gorun --hostfile hosts -x GOCCL_TRANSPORT=tcp -x PATH ./train
    salloc -N 2 -n 16 gorun ./train
`

// usageLine is printed with every usage error.
const usageLine = `usage: gorun [-n N] [-H host:slots,... | --hostfile FILE] [flags] prog [args...]
Run 'gorun --help' for the manual.
`
