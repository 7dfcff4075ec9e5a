package main

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's graph DSL
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

// momentumSGD is stochastic gradient descent with (heavy-ball) momentum,
// as PyTorch's SGD and goccl's examples/mnist do it: v = m*v + g, then
// w -= lr*v. GoMLX v0.26.0's SGD has no momentum; this one is here so the
// program can train exactly as examples/mnist does, and it shows what an
// optimizer needs for dp: UpdateGraphWithGradients, which applies given
// gradients to the trainable variables the graph uses, in context order.
type momentumSGD struct {
	lr, momentum float64
}

// UpdateGraph implements optimizers.Interface (single-process training).
func (o momentumSGD) UpdateGraph(ctx *mlctx.Context, _ *Graph, loss *Node) {
	o.UpdateGraphWithGradients(ctx, ctx.BuildTrainableVariablesGradientsGraph(loss), loss.DType())
}

// UpdateGraphWithGradients implements train.OptimizeWithGradients: grads[i]
// is the gradient of the i-th trainable variable used by the graph, in
// ctx.IterVariables order. The velocities are variables under
// /momentum_sgd, zero at first.
func (o momentumSGD) UpdateGraphWithGradients(ctx *mlctx.Context, grads []*Node, _ dtypes.DType) {
	if len(grads) == 0 {
		return
	}
	g := grads[0].Graph()
	i := 0
	for v := range ctx.IterVariables() {
		if !v.Trainable || !v.InUseByGraph(g) {
			continue
		}
		if i == len(grads) {
			panic(fmt.Sprintf("momentum SGD: %d gradients for more trainable variables", len(grads)))
		}
		vel := ctx.Checked(false).InAbsPath("/momentum_sgd"+v.Scope()).WithInitializer(initializers.Zero).
			VariableWithShape(v.Name(), v.Shape()).SetTrainable(false)
		next := Add(MulScalar(vel.ValueGraph(g), o.momentum), grads[i])
		vel.SetValueGraph(next)
		v.SetValueGraph(Sub(v.ValueGraph(g), MulScalar(next, o.lr)))
		i++
	}
	if i != len(grads) {
		panic(fmt.Sprintf("momentum SGD: %d gradients for %d trainable variables", len(grads), i))
	}
}

// Clear implements optimizers.Interface: it drops the velocities.
func (o momentumSGD) Clear(ctx *mlctx.Context) error {
	return ctx.InAbsPath("/momentum_sgd").DeleteVariablesInScope()
}
