package main

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/goccl/goccl/examples/ddp"
)

// mlp is a multilayer perceptron with ReLU hidden layers and a softmax
// cross-entropy output. Layer l maps dims[l] inputs to dims[l+1] outputs
// with weights W_l (dims[l] x dims[l+1], row-major, parameter 2l) and bias
// b_l (parameter 2l+1), both held by the data-parallel helper.
//
// Activations and deltas are allocated once for the largest batch, so a
// step allocates nothing but what gonum's parallel matrix multiply does.
type mlp struct {
	dims   []int
	d      *ddp.DDP
	acts   [][]float32 // acts[0] is the input batch, acts[l] layer l's output
	deltas [][]float32 // deltas[l]: gradient of the loss wrt layer l's pre-activation (l >= 1)
	maxRow int
}

// paramSizes lists the parameter tensors of an MLP with layer widths dims,
// in forward order.
func paramSizes(dims []int) []int {
	var s []int
	for l := 0; l+1 < len(dims); l++ {
		s = append(s, dims[l]*dims[l+1], dims[l+1])
	}
	return s
}

func newMLP(dims []int, d *ddp.DDP, maxBatch int) *mlp {
	m := &mlp{dims: dims, d: d, maxRow: maxBatch}
	for l, w := range dims {
		m.acts = append(m.acts, make([]float32, maxBatch*w))
		if l == 0 {
			m.deltas = append(m.deltas, nil)
		} else {
			m.deltas = append(m.deltas, make([]float32, maxBatch*w))
		}
	}
	return m
}

// init fills the parameters: He-normal weights, zero biases.
func (m *mlp) init(rng *rand.Rand) {
	for l := 0; l+1 < len(m.dims); l++ {
		std := math.Sqrt(2 / float64(m.dims[l]))
		for i := range m.w(l) {
			m.w(l)[i] = float32(rng.NormFloat64() * std)
		}
		clear(m.b(l))
	}
}

func (m *mlp) layers() int       { return len(m.dims) - 1 }
func (m *mlp) w(l int) []float32 { return m.d.Param(2 * l) }
func (m *mlp) b(l int) []float32 { return m.d.Param(2*l + 1) }
func mat(rows, cols int, data []float32) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: data[:rows*cols]}
}

// input is the input batch buffer for n rows; fill it before forward.
func (m *mlp) input(n int) []float32 { return m.acts[0][:n*m.dims[0]] }

// forward runs the first n rows of the input batch through the network and
// leaves the class probabilities in the last activation.
func (m *mlp) forward(n int) {
	for l := range m.layers() {
		in, out := m.dims[l], m.dims[l+1]
		z := m.acts[l+1][:n*out]
		b := m.b(l)
		for r := range n {
			copy(z[r*out:(r+1)*out], b)
		}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, mat(n, in, m.acts[l]), mat(in, out, m.w(l)), 1, mat(n, out, z))
		if l+1 < m.layers() {
			for i, v := range z {
				if v < 0 {
					z[i] = 0
				}
			}
		} else {
			softmax(z, out)
		}
	}
}

// softmax replaces each row of z (width k) by its softmax.
func softmax(z []float32, k int) {
	for r := 0; r < len(z); r += k {
		row := z[r : r+k]
		mx := row[0]
		for _, v := range row {
			mx = max(mx, v)
		}
		var sum float32
		for i, v := range row {
			e := float32(math.Exp(float64(v - mx)))
			row[i] = e
			sum += e
		}
		for i := range row {
			row[i] /= sum
		}
	}
}

// loss is the mean cross-entropy of the first n rows against labels.
func (m *mlp) loss(n int, labels []uint8) float64 {
	k := m.dims[len(m.dims)-1]
	p := m.acts[len(m.acts)-1]
	var s float64
	for r := range n {
		s -= math.Log(max(float64(p[r*k+int(labels[r])]), 1e-30))
	}
	return s / float64(n)
}

// correct counts the rows whose most probable class is the label.
func (m *mlp) correct(n int, labels []uint8) int {
	k := m.dims[len(m.dims)-1]
	p := m.acts[len(m.acts)-1]
	c := 0
	for r := range n {
		row := p[r*k : (r+1)*k]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		if best == int(labels[r]) {
			c++
		}
	}
	return c
}

// backward computes the gradient of the mean loss over the first n rows
// (forward must have run on them) into the helper's gradient buffers, last
// layer first, and marks each gradient ready as soon as it is final, so the
// helper's allreduce of the later layers overlaps the backward pass of the
// earlier ones.
func (m *mlp) backward(n int, labels []uint8) error {
	L := m.layers()
	k := m.dims[L]
	delta := m.deltas[L][:n*k]
	copy(delta, m.acts[L][:n*k])
	inv := 1 / float32(n)
	for r := range n {
		delta[r*k+int(labels[r])] -= 1
	}
	for i := range delta {
		delta[i] *= inv
	}
	for l := L - 1; l >= 0; l-- {
		in, out := m.dims[l], m.dims[l+1]
		delta := mat(n, out, m.deltas[l+1])
		// db_l = column sums of delta; dW_l = acts[l]^T delta.
		db := m.d.Grad(2*l + 1)
		clear(db)
		for r := range n {
			row := delta.Data[r*out : (r+1)*out]
			for j, v := range row {
				db[j] += v
			}
		}
		if err := m.d.MarkReady(2*l + 1); err != nil {
			return err
		}
		blas32.Gemm(blas.Trans, blas.NoTrans, 1, mat(n, in, m.acts[l]), delta, 0, mat(in, out, m.d.Grad(2*l)))
		if err := m.d.MarkReady(2 * l); err != nil {
			return err
		}
		if l == 0 {
			break
		}
		// delta_l = (delta_{l+1} W_l^T) masked by the ReLU of layer l.
		prev := mat(n, in, m.deltas[l])
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, delta, mat(in, out, m.w(l)), 0, prev)
		a := m.acts[l][:n*in]
		for i, v := range a {
			if v <= 0 {
				prev.Data[i] = 0
			}
		}
	}
	return nil
}

// sgd is SGD with momentum (PyTorch's form: v = mu v + g; p -= lr v) over
// the helper's flat parameter and gradient buffers.
type sgd struct {
	lr, momentum float32
	v            []float32
}

func (o *sgd) step(params, grads []float32) {
	if o.momentum == 0 {
		for i, g := range grads {
			params[i] -= o.lr * g
		}
		return
	}
	if o.v == nil {
		o.v = make([]float32, len(params))
	}
	v := o.v[:len(params)]
	for i, g := range grads {
		v[i] = o.momentum*v[i] + g
		params[i] -= o.lr * v[i]
	}
}
