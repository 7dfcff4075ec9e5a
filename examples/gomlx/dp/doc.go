// Package dp trains a GoMLX model data-parallel over goccl: every rank (a
// process, usually started by gorun) holds the whole model, trains on its
// share of each global batch, and the ranks average their gradients with a
// goccl allreduce before every optimizer update, so all replicas stay
// identical.
//
// GoMLX has no call-back from a compiled graph to Go, and train.Trainer has
// no hook between the gradients and the update, so a Trainer splits each
// step into two compiled executions with the allreduce on the host between
// them:
//
//  1. the gradient execution runs the model and the loss on this rank's
//     batch and returns the loss, the metrics and the gradient of every
//     trainable variable (context.Context.BuildTrainableVariablesGradientsGraph);
//  2. the gradients are copied into one fused buffer allocated once in
//     registered memory (comm.Alloc), averaged across ranks bucket by bucket
//     (persistent comm.Avg allreduces, in place), and copied into
//     input tensors that share memory with the backend, allocated once;
//  3. the update execution applies them with the optimizer
//     (train.OptimizeWithGradients.UpdateGraphWithGradients, implemented by
//     optimizers.StochasticGradientDescent and optimizers.Adam). An
//     optimizer without that method is refused by New.
//
// Non-trainable variables that the gradient execution updates (batch
// normalization's moving mean and variance) are computed by each rank from
// its own share, so they are broadcast from rank 0 after every gradient
// execution, as PyTorch DDP broadcasts its buffers; the random number
// generator's state is left apart.
//
// The loss and the metrics are averaged across ranks too (one small
// allreduce, started before the gradients and waited for after the update),
// so what rank 0 logs describes the global batch.
//
// Overlap, honestly: a GoMLX execution hands back its outputs only when it
// has finished, so no allreduce can start during the backward pass as
// PyTorch DDP's buckets do. What the buckets overlap is host work: the copy
// of bucket k+1 into the fused buffer while bucket k is reduced, and the
// copy of bucket k out while the later ones are reduced. The communication
// itself is on the step's critical path.
//
// The first TrainStep builds both graphs, initializes the variables that
// have no value and broadcasts every variable of the context from rank 0
// (so a checkpoint loaded on rank 0 alone reaches every rank), after checking
// that all ranks have the same variables (names, shapes, dtypes). It then
// seeds each rank's random number generator with Options.Seed + rank: with
// the same seed everywhere, dropout would draw the same mask on every rank.
// After its update it broadcasts the variables once more, the random
// generator's state excepted: the optimizer's variables (moments, step
// count) are created by the first update, from the checkpoint on rank 0.
//
// Errors: a TrainStep that fails (a peer died, a collective failed, an
// execution failed) returns an error naming the step and the cause, and the
// Trainer refuses every later step. goccl fails a collective on every rank
// when one rank dies, so the other ranks get an error instead of hanging.
//
// Limits: the trainable variables must all be float32 or all float64;
// hooks registered with train.AddPerStepUpdateGraphFn are refused (they
// belong to the gradient graph, which no longer holds the update); the
// gradients are not accumulated over several steps.
package dp
