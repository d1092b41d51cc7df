"""Rules for exercising the verifier: identities that hold, and subtly wrong ones that do not.

Every TRUE rule holds for all shapes where both sides are defined with equal output shapes (and
its `where` clause holds); every WRONG rule fails on some such shape, which the refuter finds.
`why` says, for a true rule, the laws it follows from and, for a wrong one, what is wrong with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    text: str
    why: str


P1 = "stride=[1, 1], pad=[1, 1, 1, 1]"  # a 3x3 "same" convolution
P0 = "stride=[1, 1], pad=[0, 0, 0, 0]"
S2 = "stride=[2, 2], pad=[0, 0, 0, 0]"
POOL2 = "kernel=[2, 2], stride=[2, 2], pad=[0, 0, 0, 0]"
POOL3 = "kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1]"
T = "perm=[1, 0]"
MAT2 = "rank(a) == 2, rank(b) == 2"

TRUE_RULES: list[Case] = [
    # --- matmul ---
    Case("matmul(matmul(a, b), c) == matmul(a, matmul(b, c))", "matmul-assoc"),
    Case("matmul(a, matmul(b, matmul(c, d))) == matmul(matmul(matmul(a, b), c), d)", "matmul-assoc twice"),
    Case("matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c)) "
         "where rank(b) >= 2, rank(c) >= 2, dim(b, -2) == dim(c, -2), dim(b, -1) == dim(c, -1)",
         "matmul-add-right"),
    Case("add(matmul(a, c), matmul(b, c)) == matmul(add(a, b), c) "
         "where rank(a) >= 2, rank(b) >= 2, dim(a, -2) == dim(b, -2), dim(a, -1) == dim(b, -1)",
         "matmul-add-left, right to left"),
    Case("matmul(scalar_mul(a, scale=?s), b) == matmul(a, scalar_mul(b, scale=?s))",
         "matmul-scalar-left and matmul-scalar-right"),
    Case("scalar_mul(matmul(a, b), scale=2.0) == matmul(scalar_mul(a, scale=2.0), b)", "matmul-scalar-left"),
    Case("(matmul(x, w1), matmul(x, w2)) == "
         "(split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[0], "
         "split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[1]) "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2",
         "two matmuls sharing an input merge: matmul-concat-cols, split-concat-0/1"),
    Case("concat(matmul(x, w1), matmul(x, w2), axis=1) == matmul(x, concat(w1, w2, axis=1)) "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2", "matmul-concat-cols"),
    Case("concat(matmul(a, c), matmul(b, c), axis=0) == matmul(concat(a, b, axis=0), c) "
         "where rank(a) == 2, rank(c) == 2", "matmul-concat-rows"),
    Case("add(matmul(a, c), matmul(b, d)) == matmul(concat(a, b, axis=1), concat(c, d, axis=0)) "
         "where rank(a) == 2, rank(c) == 2", "matmul-concat-inner"),
    Case(f"transpose(matmul(a, b), {T}) == matmul(transpose(b, {T}), transpose(a, {T}))", "matmul-transpose"),
    Case(f"matmul(transpose(a, {T}), transpose(b, {T})) == transpose(matmul(b, a), {T})",
         "matmul-transpose, right to left"),
    Case(f"matmul(a, b) == transpose(matmul(transpose(b, {T}), transpose(a, {T})), {T}) where {MAT2}",
         "matmul-transpose, transpose-involution"),
    Case("matmul(a, const_imm(n=?n)) == a where ?n == dim(a, -1)", "matmul-identity"),
    Case("matmul(matmul(a, b), const_imm(n=?n)) == matmul(a, b) where ?n == dim(b, -1)", "matmul-identity"),
    # --- element-wise arithmetic ---
    Case("add(add(a, b), c) == add(add(a, c), b)", "add-assoc, add-comm"),
    Case("mul(a, add(b, c)) == add(mul(a, b), mul(a, c))", "mul-comm, mul-add-dist"),
    Case("sub(a, b) == add(scalar_mul(b, scale=-1.0), a)", "sub-as-add, add-comm"),
    Case("scalar_mul(add(a, b), scale=2.0) == add(scalar_mul(a, scale=2.0), scalar_mul(b, scale=2.0))",
         "scalar-add"),
    Case("scalar_mul(scalar_mul(x, scale=2.0), scale=3.0) == scalar_mul(x, scale=6.0)", "scalar-compose"),
    Case("scalar_mul(scalar_mul(x, scale=0.5), scale=2.0) == x", "scalar-compose, scalar-one"),
    Case("scalar_mul(mul(a, b), scale=2.0) == mul(a, scalar_mul(b, scale=2.0))", "scalar-mul, mul-comm"),
    Case("relu(relu(relu(x))) == relu(x)", "relu-idem twice"),
    Case("relu(scalar_mul(x, scale=3.0)) == scalar_mul(relu(x), scale=3.0)", "relu-scale"),
    Case("relu(scalar_mul(x, scale=?s)) == scalar_mul(relu(x), scale=?s) where ?s >= 0", "relu-scale"),
    # --- concat / split / transpose ---
    Case("concat(concat(a, b, axis=1), c, axis=1) == concat(a, concat(b, c, axis=1), axis=1)", "concat-assoc"),
    Case("split(concat(a, b, axis=1), axis=1, sizes=[dim(a, 1), dim(b, 1)])[0] == a", "split-concat-0"),
    Case("(split(concat(a, b, axis=?k), axis=?k, sizes=[dim(a, ?k), dim(b, ?k)])[0], "
         "split(concat(a, b, axis=?k), axis=?k, sizes=[dim(a, ?k), dim(b, ?k)])[1]) == (a, b)",
         "split-concat-0/1, multi-output"),
    Case("concat(split(x, axis=0, sizes=[2, 3])[0], split(x, axis=0, sizes=[2, 3])[1], axis=0) == x",
         "concat-split"),
    Case("concat(concat(a, b, axis=0), concat(c, d, axis=0), axis=1) == "
         "concat(concat(a, c, axis=1), concat(b, d, axis=1), axis=0) "
         "where dim(a, 0) == dim(b, 0), dim(a, 1) == dim(c, 1)", "concat-swap (2x2 block matrix)"),
    Case(f"transpose(transpose(x, {T}), {T}) == x", "transpose-involution"),
    Case(f"transpose(concat(a, b, axis=0), {T}) == concat(transpose(a, {T}), transpose(b, {T}), axis=1)",
         "transpose-concat"),
    Case(f"concat(a, b, axis=1) == transpose(concat(transpose(a, {T}), transpose(b, {T}), axis=0), {T})",
         "transpose-concat, transpose-involution"),
    Case("relu(concat(a, b, axis=?k)) == concat(relu(a), relu(b), axis=?k)", "relu-concat"),
    Case("tanh(concat(a, b, axis=0)) == concat(tanh(a), tanh(b), axis=0)", "tanh-concat"),
    Case("relu(split(x, axis=1, sizes=[?m, ?n])[0]) == split(relu(x), axis=1, sizes=[?m, ?n])[0]",
         "relu-split-0"),
    Case("scalar_mul(concat(a, b, axis=0), scale=?s) == "
         "concat(scalar_mul(a, scale=?s), scalar_mul(b, scale=?s), axis=0)", "scalar-concat"),
    Case("add(concat(a, b, axis=1), concat(c, d, axis=1)) == concat(add(a, c), add(b, d), axis=1) "
         "where rank(a) == rank(c), dim(a, 1) == dim(c, 1)", "add-concat"),
    Case(f"relu(transpose(concat(a, b, axis=0), {T})) == concat(relu(transpose(a, {T})), "
         f"relu(transpose(b, {T})), axis=1)", "transpose-concat, relu-concat"),
    # --- convolution ---
    Case(f"relu(conv2d(x, w, {P1})) == conv2d(x, w, {P1}, act=relu)", "conv-relu"),
    Case(f"sigmoid(conv2d(x, w, b, {S2})) == conv2d(x, w, b, {S2}, act=sigmoid)", "conv-bias-sigmoid"),
    Case(f"relu(conv2d(x, w, b, {P1}, groups=2)) == conv2d(x, w, b, {P1}, groups=2, act=relu)",
         "conv-bias-relu, grouped"),
    Case(f"(conv2d(x, w1, {P1}), conv2d(x, w2, {P1})) == "
         f"(split(conv2d(x, concat(w1, w2, axis=0), {P1}), axis=1, sizes=[dim(w1, 0), dim(w2, 0)])[0], "
         f"split(conv2d(x, concat(w1, w2, axis=0), {P1}), axis=1, sizes=[dim(w1, 0), dim(w2, 0)])[1])",
         "two convolutions sharing an input merge: conv-concat-weights, split-concat-0/1"),
    Case(f"concat(conv2d(x, w1, {S2}), conv2d(x, w2, {S2}), axis=1) == conv2d(x, concat(w1, w2, axis=0), {S2})",
         "conv-concat-weights"),
    Case(f"concat(conv2d(x, w1, {P1}, act=relu), conv2d(x, w2, {P1}, act=relu), axis=1) == "
         f"conv2d(x, concat(w1, w2, axis=0), {P1}, act=relu)", "conv-relu, conv-concat-weights, relu-concat"),
    Case(f"concat(conv2d(x, w1, {P1}), conv2d(x, w2, {P0}), axis=1) == "
         f"conv2d(x, concat(w1, enlarge(w2, kernel=[3, 3]), axis=0), {P1}) "
         "where dim(w1, 2) == 3, dim(w1, 3) == 3, dim(w2, 2) == 1, dim(w2, 3) == 1",
         "a sibling 1x1 convolution enlarged to 3x3 merges: conv-enlarge, conv-concat-weights"),
    Case(f"conv2d(x, enlarge(w, kernel=[3, 3]), {P1}) == conv2d(x, w, {P0}) "
         "where dim(w, 2) == 1, dim(w, 3) == 1", "conv-enlarge"),
    Case(f"conv2d(x, const_iconv(channels=?c, kernel=[3, 3], groups=1), {P1}) == x where ?c == dim(x, 1)",
         "conv-identity"),
    Case(f"relu(conv2d(x, const_iconv(channels=?c, kernel=[3, 3], groups=?c), {P1}, groups=?c)) == relu(x) "
         "where ?c == dim(x, 1)", "conv-identity (depthwise)"),
    Case(f"avgpool2d(x, {POOL3}, count_include_pad=true) == "
         "conv2d(x, const_pool(channels=dim(x, 1), kernel=[3, 3]), stride=[1, 1], pad=[1, 1, 1, 1], "
         "groups=dim(x, 1))", "avgpool-as-conv"),
    Case(f"conv2d(concat(a, b, axis=0), w, {P1}) == concat(conv2d(a, w, {P1}), conv2d(b, w, {P1}), axis=0)",
         "conv-concat-batch"),
    Case(f"conv2d(add(a, b), w, {P1}) == add(conv2d(a, w, {P1}), conv2d(b, w, {P1})) "
         "where rank(a) == rank(b), dim(a, 0) == dim(b, 0), dim(a, 1) == dim(b, 1), dim(a, 2) == dim(b, 2), "
         "dim(a, 3) == dim(b, 3)", "conv-add-input"),
    Case(f"add(conv2d(x, a, {P1}), conv2d(x, b, {P1})) == conv2d(x, add(a, b), {P1}) "
         "where rank(a) == rank(b), dim(a, 0) == dim(b, 0), dim(a, 1) == dim(b, 1), dim(a, 2) == dim(b, 2), "
         "dim(a, 3) == dim(b, 3)", "conv-add-weights"),
    Case(f"conv2d(scalar_mul(x, scale=2.0), w, {P1}) == conv2d(x, scalar_mul(w, scale=2.0), {P1})",
         "conv-scalar-input, conv-scalar-weights"),
    Case(f"conv2d(concat(a, b, axis=1), concat(c, d, axis=1), {P0}) == "
         f"add(conv2d(a, c, {P0}), conv2d(b, d, {P0})) where dim(a, 1) == dim(c, 1)", "conv-concat-channels"),
    Case(f"conv2d(concat(a, b, axis=1), concat(c, d, axis=0), {P1}, groups=2) == "
         f"concat(conv2d(a, c, {P1}), conv2d(b, d, {P1}), axis=1) "
         "where dim(a, 1) == dim(b, 1), dim(c, 0) == dim(d, 0)", "conv-groups-concat"),
    # --- pooling and normalization ---
    Case(f"maxpool2d(concat(a, b, axis=1), {POOL2}) == concat(maxpool2d(a, {POOL2}), maxpool2d(b, {POOL2}), axis=1)",
         "maxpool2d-concat over channels"),
    Case(f"avgpool2d(concat(a, b, axis=0), {POOL3}) == concat(avgpool2d(a, {POOL3}), avgpool2d(b, {POOL3}), axis=0)",
         "avgpool2d-concat over the batch"),
    Case(f"relu(maxpool2d(x, {POOL3})) == maxpool2d(relu(x), {POOL3})", "maxpool-relu"),
    Case(f"maxpool2d(relu(concat(a, b, axis=1)), {POOL2}) == "
         f"concat(relu(maxpool2d(a, {POOL2})), relu(maxpool2d(b, {POOL2})), axis=1)",
         "relu-concat, maxpool2d-concat, maxpool-relu"),
    Case("batchnorm(concat(a, c, axis=0), s, t, m, v, epsilon=0.001) == "
         "concat(batchnorm(a, s, t, m, v, epsilon=0.001), batchnorm(c, s, t, m, v, epsilon=0.001), axis=0)",
         "batchnorm-concat-batch"),
    Case("avgpool2d(concat(a, b, axis=1), kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=false) "
         "== concat(avgpool2d(a, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=false), "
         "avgpool2d(b, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=false), axis=1)",
         "avgpool2d-concat over channels, padding not counted"),
    # --- combinations ---
    Case("matmul(a, scalar_mul(add(b, c), scale=2.0)) == "
         "add(scalar_mul(matmul(a, b), scale=2.0), scalar_mul(matmul(a, c), scale=2.0)) "
         "where rank(b) == 2, rank(c) == 2, dim(b, 0) == dim(c, 0), dim(b, 1) == dim(c, 1)",
         "matmul-scalar-right, matmul-add-right, scalar-add"),
    Case("concat(relu(matmul(a, c)), relu(matmul(b, c)), axis=0) == relu(matmul(concat(a, b, axis=0), c)) "
         "where rank(a) == 2, rank(c) == 2", "matmul-concat-rows, relu-concat"),
    Case(f"conv2d(x, w, {P1}) == conv2d(conv2d(x, const_iconv(channels=dim(x, 1), kernel=[3, 3], groups=1), {P1}), "
         f"w, {P1})", "conv-identity under another convolution"),
    Case("relu(concat(a, b, axis=?k)) == concat(relu(a), relu(b), axis=?k) where ?k == rank(a) - 1",
         "relu-concat on the last axis"),
    Case(f"concat(conv2d(x, w1, b1, {P1}, act=relu), conv2d(x, w2, b2, {P1}, act=relu), axis=1) == "
         f"conv2d(x, concat(w1, w2, axis=0), concat(b1, b2, axis=0), {P1}, act=relu)",
         "merging convolutions with bias and a fused relu"),
    Case(f"maxpool2d(concat(a, b, axis=2), {POOL2}) == concat(maxpool2d(a, {POOL2}), maxpool2d(b, {POOL2}), axis=2) "
         "where dim(a, 2) % 2 == 0", "pooling over an H-concat aligned to the stride"),
]

# True rules beyond what the current axioms prove (UNKNOWN today): they must never be REFUTED.
HARD_TRUE_RULES: list[Case] = [
    Case("transpose(transpose(x, perm=[1, 2, 0]), perm=[2, 0, 1]) == x",
         "composing transposes: only the rank-2 involution is an axiom"),
    Case("(matmul(x, w1), matmul(x, w2), matmul(x, w3)) == "
         "(split(matmul(x, concat(w1, w2, w3, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1), dim(w3, 1)])[0], "
         "split(matmul(x, concat(w1, w2, w3, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1), dim(w3, 1)])[1], "
         "split(matmul(x, concat(w1, w2, w3, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1), dim(w3, 1)])[2]) "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2, rank(w3) == 2",
         "three-way merge: the axioms know two-part concat and split only"),
    Case("add(a, sub(b, a)) == b where rank(a) == rank(b), dim(a, 0) == dim(b, 0)",
         "cancellation: no axiom says a - a = 0"),
]

WRONG_RULES: list[Case] = [
    Case(f"maxpool2d(concat(a, b, axis=2), {POOL2}) == concat(maxpool2d(a, {POOL2}), maxpool2d(b, {POOL2}), axis=2)",
         "maxpool over an H-concat without where dim(a, 2) % 2 == 0"),
    # --- matmul ---
    Case("matmul(a, b) == matmul(b, a)", "matmul does not commute (square matrices)"),
    Case(f"transpose(matmul(a, b), {T}) == matmul(transpose(a, {T}), transpose(b, {T}))",
         "transposes in the wrong order: (AB)^T = B^T A^T"),
    Case(f"matmul(transpose(a, {T}), transpose(b, {T})) == transpose(matmul(a, b), {T})",
         "transposes in the wrong order, right to left"),
    Case("matmul(matmul(a, b), c) == matmul(a, matmul(c, b))", "operands swapped in the association"),
    Case("matmul(a, add(b, c)) == add(matmul(a, b), c)", "matmul distributed over only one term"),
    Case("(matmul(x, w1), matmul(x, w2)) == "
         "(split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[1], "
         "split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w1, 1), dim(w2, 1)])[0]) "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2", "merged matmul: split outputs swapped"),
    Case("matmul(x, w2) == split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=[dim(w2, 1), dim(w1, 1)])[0] "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2", "split sizes swapped: part 0 is still w1's"),
    Case("matmul(concat(a, b, axis=1), concat(c, d, axis=0)) == add(matmul(a, d), matmul(b, c)) "
         "where rank(a) == 2, rank(c) == 2", "block inner product pairs the wrong blocks"),
    Case("matmul(concat(a, b, axis=0), c) == concat(matmul(b, c), matmul(a, c), axis=0) "
         "where rank(a) == 2, rank(c) == 2", "rows concatenated in the wrong order"),
    Case("matmul(a, const_one(shape=[?n, ?n])) == a where ?n == dim(a, -1)", "a matrix of ones is no identity"),
    Case("scalar_mul(matmul(a, b), scale=2.0) == matmul(scalar_mul(a, scale=2.0), scalar_mul(b, scale=2.0))",
         "the scale is applied twice"),
    # --- element-wise arithmetic ---
    Case("relu(scalar_mul(x, scale=-1.0)) == scalar_mul(relu(x), scale=-1.0)", "relu is not odd"),
    Case("relu(scalar_mul(x, scale=?s)) == scalar_mul(relu(x), scale=?s)", "relu-scale without ?s >= 0"),
    Case("relu(add(a, b)) == add(relu(a), relu(b))", "relu is not additive"),
    Case("relu(sub(a, b)) == sub(relu(a), relu(b))", "relu is not additive"),
    Case("tanh(scalar_mul(x, scale=2.0)) == scalar_mul(tanh(x), scale=2.0)", "tanh is not homogeneous"),
    Case("sub(a, b) == sub(b, a)", "sub does not commute"),
    Case("sub(a, b) == add(a, scalar_mul(b, scale=1.0))", "wrong sign"),
    Case("sub(sub(a, b), c) == sub(a, sub(b, c))", "sub is not associative"),
    Case("scalar_mul(scalar_mul(x, scale=2.0), scale=3.0) == scalar_mul(x, scale=5.0)",
         "wrong scale: scales multiply"),
    Case("scalar_mul(add(a, b), scale=2.0) == add(scalar_mul(a, scale=2.0), b)", "scale applied to one term"),
    Case("mul(add(a, b), c) == add(mul(a, c), b)", "mul distributed over one term"),
    Case("gelu(x, approximate=tanh) == gelu(x, approximate=none)", "the tanh approximation is not exact"),
    Case("sigmoid(concat(a, b, axis=0)) == concat(sigmoid(a), relu(b), axis=0)", "wrong activation on a part"),
    # --- concat / split / transpose ---
    Case("concat(a, b, axis=0) == concat(b, a, axis=0)", "concat order matters"),
    Case("concat(concat(a, b, axis=0), concat(c, d, axis=0), axis=1) == "
         "concat(concat(a, b, axis=1), concat(c, d, axis=1), axis=0)", "2x2 block matrix: b and c swapped"),
    Case(f"transpose(concat(a, b, axis=0), {T}) == concat(transpose(b, {T}), transpose(a, {T}), axis=1)",
         "transpose-concat with the parts swapped"),
    Case("split(x, axis=0, sizes=[2, 3])[0] == split(x, axis=0, sizes=[3, 2])[1]", "split sizes swapped"),
    Case("concat(split(x, axis=1, sizes=[?m, ?n])[1], split(x, axis=1, sizes=[?m, ?n])[0], axis=1) == x",
         "parts joined in the wrong order rotate the tensor"),
    Case("transpose(transpose(x, perm=[1, 2, 0]), perm=[1, 2, 0]) == x", "[1, 2, 0] is not an involution"),
    Case(f"reshape(transpose(x, {T}), shape=[dim(x, 0), dim(x, 1)]) == x",
         "reshape is not the inverse of transpose"),
    Case(f"flatten(transpose(x, {T}), axis=1) == flatten(x, axis=1)", "transpose of a square matrix"),
    Case("softmax(concat(a, b, axis=1), axis=1) == concat(softmax(a, axis=1), softmax(b, axis=1), axis=1)",
         "softmax normalizes across the concatenated axis"),
    Case("pad(relu(x), pads=[1, 1, 1, 1], value=-1.0) == relu(pad(x, pads=[1, 1, 1, 1], value=-1.0))",
         "relu changes the pad value -1 to 0"),
    # --- convolution ---
    Case(f"relu(conv2d(x, w, {P1})) == conv2d(x, w, {P1}, act=sigmoid)", "sigmoid fused where relu was"),
    Case(f"relu(conv2d(x, w, b, {P1})) == conv2d(x, w, b, {P1}, act=tanh)", "tanh fused where relu was"),
    Case(f"relu(add(conv2d(x, w, {P1}), y)) == add(conv2d(x, w, {P1}, act=relu), y)",
         "activation moved across an add"),
    Case("conv2d(x, w, stride=[2, 2], pad=[1, 1, 1, 1]) == conv2d(x, w, stride=[2, 2], pad=[0, 0, 2, 2])",
         "mismatched pads: same output size, shifted windows"),
    Case(f"conv2d(x, enlarge(w, kernel=[3, 3]), stride=[1, 1], pad=[2, 2, 0, 0]) == conv2d(x, w, {P0}) "
         "where dim(w, 2) == 1, dim(w, 3) == 1", "enlarge with the pad moved to one side"),
    Case(f"(conv2d(x, w1, {P1}), conv2d(x, w2, {P1})) == "
         f"(split(conv2d(x, concat(w1, w2, axis=0), {P1}), axis=1, sizes=[dim(w1, 0), dim(w2, 0)])[1], "
         f"split(conv2d(x, concat(w1, w2, axis=0), {P1}), axis=1, sizes=[dim(w1, 0), dim(w2, 0)])[0])",
         "merged convolution: split outputs swapped"),
    Case(f"conv2d(concat(a, b, axis=1), concat(c, d, axis=0), {P1}, groups=2) == "
         f"concat(conv2d(a, c, {P1}), conv2d(b, d, {P1}), axis=1)",
         "grouped convolution without equal halves of the output channels"),
    Case(f"conv2d(concat(a, b, axis=1), concat(c, d, axis=1), {P0}) == "
         f"add(conv2d(a, d, {P0}), conv2d(b, c, {P0})) where dim(a, 1) == dim(b, 1)",
         "input channel blocks paired with the wrong kernels"),
    Case(f"conv2d(scalar_mul(x, scale=2.0), w, {P1}) == conv2d(x, scalar_mul(w, scale=0.5), {P1})",
         "wrong scale: it moves unchanged"),
    Case(f"conv2d(x, add(a, b), {P1}) == add(conv2d(x, a, {P1}), conv2d(x, b, stride=[1, 1], pad=[0, 0, 2, 2]))",
         "conv-add-weights with mismatched pads"),
    Case("conv2d(x, const_iconv(channels=?c, kernel=[3, 3], groups=1), stride=[1, 1], pad=[0, 0, 2, 2]) == x "
         "where ?c == dim(x, 1)", "identity kernel with off-center padding shifts"),
    Case(f"avgpool2d(x, {POOL3}, count_include_pad=false) == "
         "conv2d(x, const_pool(channels=dim(x, 1), kernel=[3, 3]), stride=[1, 1], pad=[1, 1, 1, 1], "
         "groups=dim(x, 1))", "avgpool-as-conv only when the padding is counted"),
    # --- pooling and normalization ---
    Case(f"avgpool2d(concat(a, b, axis=3), {POOL2}) == concat(avgpool2d(a, {POOL2}), avgpool2d(b, {POOL2}), axis=3)",
         "avgpool over a W-concat without where dim(a, 3) % 2 == 0"),
    Case(f"scalar_mul(maxpool2d(x, {POOL2}), scale=-1.0) == maxpool2d(scalar_mul(x, scale=-1.0), {POOL2})",
         "max of the negation is minus the min"),
    Case("global_avgpool(concat(a, b, axis=2)) == "
         "scalar_mul(add(global_avgpool(a), global_avgpool(b)), scale=0.5)",
         "the mean of the means only when where dim(a, 2) == dim(b, 2)"),
    Case("batchnorm(concat(a, c, axis=0), s, t, m, v, epsilon=0.001) == "
         "concat(batchnorm(a, s, t, m, v, epsilon=0.001), batchnorm(c, t, s, m, v, epsilon=0.001), axis=0)",
         "scale and bias swapped on one part"),

]
