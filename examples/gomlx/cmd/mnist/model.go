package main

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's graph DSL reads as math
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	mltrain "github.com/gomlx/gomlx/pkg/ml/train"
)

// models maps -model to its GoMLX model function. Each takes a batch of
// normalised images as [batch, 784] float32 and returns the logits,
// [batch, 10].
var models = map[string]mltrain.ModelFn{"mlp": mlpModel, "cnn": cnnModel}

// mlpModel is the perceptron of goccl's examples/mnist: 784-256-128-10
// with ReLUs (235,146 parameters).
func mlpModel(ctx *mlctx.Context, _ any, inputs []*Node) []*Node {
	x := inputs[0]
	x = activations.Relu(layers.Dense(ctx.In("dense1"), x, true, 256))
	x = activations.Relu(layers.Dense(ctx.In("dense2"), x, true, 128))
	return []*Node{layers.Dense(ctx.In("logits"), x, true, 10)}
}

// cnnModel is a small convolutional network: a 5x5 convolution of 16
// channels and a 3x3 one of 32, both with stride 2 and a ReLU, then 64
// units and the 10 logits (106,122 parameters).
func cnnModel(ctx *mlctx.Context, _ any, inputs []*Node) []*Node {
	x := inputs[0]
	batch := x.Shape().Dimensions[0]
	x = Reshape(x, batch, 28, 28, 1)
	x = activations.Relu(patchConv(ctx.In("conv1"), x, 5, 2, 16)) // 14x14x16
	x = activations.Relu(patchConv(ctx.In("conv2"), x, 3, 2, 32)) // 7x7x32
	x = Reshape(x, batch, -1)
	x = activations.Relu(layers.Dense(ctx.In("dense"), x, true, 64))
	return []*Node{layers.Dense(ctx.In("logits"), x, true, 10)}
}

// patchConv is a 2D convolution of x ([batch, height, width, channels])
// with a kernel x kernel window, the given stride, "same" zero padding and
// out channels, written as a dense layer shared by all the windows
// (im2col). GoMLX's layers.Convolution would do, but simplego (GoMLX
// v0.26.0) cannot differentiate it: the gradient of a convolution's input
// needs the Reverse op, that of max pooling SelectAndScatterMax, and that
// of slicing or padding the Pad op, none of which it implements. So the
// windows are gathered (Gather's gradient is a ScatterSum, which it has)
// with the padding as a clamped index whose value is masked to zero.
func patchConv(ctx *mlctx.Context, x *Node, kernel, stride, out int) *Node {
	g := x.Graph()
	dims := x.Shape().Dimensions
	batch, h, w, c := dims[0], dims[1], dims[2], dims[3]
	oh, ow := (h+stride-1)/stride, (w+stride-1)/stride
	top, left := (kernel-1)/2, (kernel-1)/2 // as GoMLX's PadSame
	n := oh * ow * kernel * kernel
	idx := make([]int32, n)
	mask := make([]float32, n)
	for i := range n {
		oy, ox, dy, dx := i/(ow*kernel*kernel), i/(kernel*kernel)%ow, i/kernel%kernel, i%kernel
		iy, ix := oy*stride+dy-top, ox*stride+dx-left
		if iy >= 0 && iy < h && ix >= 0 && ix < w {
			idx[i], mask[i] = int32(iy*w+ix), 1
		}
	}
	pixels := Transpose(Reshape(x, batch, h*w, c), 0, 1) // [h*w, batch, c]
	windows := Gather(pixels, Reshape(Const(g, idx), n, 1))
	windows = Mul(windows, ConvertDType(Reshape(Const(g, mask), n, 1, 1), x.DType())) // [n, batch, c]
	windows = Reshape(Transpose(windows, 0, 1), batch, oh, ow, kernel*kernel*c)
	return layers.Dense(ctx, windows, true, out)
}

// accuracy is the fraction of the batch whose largest logit is the label
// (labels are [batch, 1] int32).
func accuracy(_ *mlctx.Context, labels, predictions []*Node) *Node {
	ok := Equal(ArgMax(predictions[0], -1, labels[0].DType()), Reshape(labels[0], -1))
	return ReduceAllMean(ConvertDType(ok, predictions[0].DType()))
}

// predict builds the evaluation graph: the predicted class of each image.
func predict(model mltrain.ModelFn) func(ctx *mlctx.Context, x *Node) *Node {
	return func(ctx *mlctx.Context, x *Node) *Node {
		ctx.SetTraining(x.Graph(), false)
		return ArgMax(model(ctx, nil, []*Node{x})[0], -1, dtypes.Int32)
	}
}
