"""A second, held-out-style rule set: true identities, wrong rules and vacuous rules.

Written apart from `tests/verifier_cases.py` (no rule is in both) to stand in for the held-out
sets `taso verify-rule` is judged on: 0 wrong and 0 vacuous rules PROVED, at least 95% of the
true identities PROVED. A TRUE rule holds wherever both sides are defined with equal shapes
(and its `where` clause holds) and some shapes are; a WRONG rule fails on some such shapes; a
VACUOUS rule has no such shapes at all. `why` says what it follows from, or what is wrong.
"""

from __future__ import annotations

from tests.verifier_cases import Case

T = "perm=[1, 0]"
SAME3 = "stride=[1, 1], pad=[1, 1, 1, 1]"
DOWN = "stride=[2, 2], pad=[1, 1, 1, 1]"
VALID = "stride=[1, 1], pad=[0, 0, 0, 0]"
ANY = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr]"
MAX2 = "kernel=[2, 2], stride=[2, 2], pad=[0, 0, 0, 0]"
MAX3 = "kernel=[3, 3], stride=[2, 2], pad=[1, 1, 1, 1]"
HW = "dim(x1, 2) == dim(x2, 2), dim(x1, 3) == dim(x2, 3)"

TRUE: list[Case] = [
    # --- matmul ---
    Case(f"transpose(add(matmul(a, b), c), {T}) == "
         f"add(matmul(transpose(b, {T}), transpose(a, {T})), transpose(c, {T}))",
         "transpose-add-2, matmul-transpose: a transposed dense layer with its bias"),
    Case("matmul(a, scalar_mul(b, scale=-0.5)) == scalar_mul(matmul(a, b), scale=-0.5)", "matmul-scalar-right"),
    Case("relu(matmul(x, concat(w1, w2, axis=1))) == concat(relu(matmul(x, w1)), relu(matmul(x, w2)), axis=1) "
         "where rank(x) == 2, rank(w1) == 2, rank(w2) == 2", "matmul-concat-cols, relu-concat"),
    Case(f"transpose(matmul(transpose(a, {T}), b), {T}) == matmul(transpose(b, {T}), a)",
         "matmul-transpose, transpose-involution"),
    Case("matmul(a, concat(b, c, axis=0)) == concat(matmul(a, b), matmul(a, c), axis=0) "
         "where rank(a) == 2, rank(b) == 3, rank(c) == 3", "matmul-concat-batch-right: batches of the right operand"),
    Case("matmul(a, const_imm(n=dim(a, 1))) == a where rank(a) == 2", "matmul-identity"),
    Case("add(matmul(a, b), matmul(a, c)) == matmul(a, add(b, c)) "
         "where rank(b) == 2, rank(c) == 2, dim(b, 0) == dim(c, 0), dim(b, 1) == dim(c, 1)",
         "matmul-add-right, right to left"),
    Case("matmul(matmul(a, b), matmul(c, d)) == matmul(a, matmul(matmul(b, c), d))", "matmul-assoc twice"),
    # --- element-wise ---
    Case("add(add(a, b), add(c, d)) == add(add(add(a, b), c), d)", "add-assoc"),
    Case("mul(add(a, b), scalar_mul(c, scale=3.0)) == add(scalar_mul(mul(a, c), scale=3.0), "
         "scalar_mul(mul(b, c), scale=3.0))", "mul-add-dist, mul-comm, scalar-mul"),
    Case("relu(concat(relu(a), b, axis=0)) == concat(relu(a), relu(b), axis=0)", "relu-concat, relu-idem"),
    Case("relu(scalar_mul(x, scale=0.25)) == scalar_mul(relu(x), scale=0.25)", "relu-scale with a positive scale"),
    Case("scalar_mul(scalar_mul(x, scale=2.0), scale=0.5) == x", "scalar-compose, scalar-one"),
    Case("sub(scalar_mul(a, scale=2.0), scalar_mul(b, scale=2.0)) == scalar_mul(sub(a, b), scale=2.0)",
         "sub-as-add, scalar-add, scalar-compose"),
    Case("mul(scalar_mul(a, scale=2.0), b) == scalar_mul(mul(a, b), scale=2.0)", "scalar-mul, right to left"),
    Case("scalar_mul(add(a, add(b, c)), scale=?s) == add(add(scalar_mul(a, scale=?s), scalar_mul(b, scale=?s)), "
         "scalar_mul(c, scale=?s))", "scalar-add twice, add-assoc"),
    # --- concat, split, transpose, reshape ---
    Case("sigmoid(concat(a, b, axis=1)) == concat(sigmoid(a), sigmoid(b), axis=1)", "sigmoid-concat"),
    Case("tanh(split(x, axis=1, sizes=[?m, ?n])[1]) == split(tanh(x), axis=1, sizes=[?m, ?n])[1]", "tanh-split-1"),
    Case("concat(a, concat(b, c, axis=2), axis=2) == concat(concat(a, b, axis=2), c, axis=2)",
         "concat-assoc, right to left"),
    Case("split(concat(a, b, axis=1), axis=1, sizes=[dim(a, 1), dim(b, 1)])[1] == b", "split-concat-1"),
    Case("concat(split(x, axis=0, sizes=[2, ?n])[0], split(x, axis=0, sizes=[2, ?n])[1], axis=0) == x",
         "concat-split"),
    Case("split(x, axis=1, sizes=[?a, ?b, ?c])[2] == split(x, axis=1, sizes=[?a + ?b, ?c])[1]", "split3-left-2"),
    Case(f"transpose(concat(a, b, axis=1), {T}) == concat(transpose(a, {T}), transpose(b, {T}), axis=0)",
         "transpose-concat on the columns"),
    Case("transpose(x, perm=[0, 1, 2]) == x", "transpose-identity-3"),
    Case("relu(transpose(x, perm=[0, 2, 3, 1])) == transpose(relu(x), perm=[0, 2, 3, 1])", "relu-transpose-4"),
    Case("concat(concat(a, b, axis=0), concat(c, d, axis=0), axis=1) == "
         "concat(concat(a, c, axis=1), concat(b, d, axis=1), axis=0) where dim(a, 0) == dim(c, 0), "
         "dim(a, 1) == dim(b, 1)", "concat-swap: a 2x2 block matrix"),
    Case("mul(concat(a, b, axis=1), concat(c, d, axis=0)) == concat(mul(a, c), mul(b, d), axis=1) "
         "where rank(a) == 2, rank(c) == 1, dim(c, 0) == dim(a, 1)", "mul-concat-vector: a per-column scale"),
    Case(f"transpose(add(x, b), {T}) == add(transpose(x, {T}), transpose(b, {T}))",
         "transpose-add-2: transpose over a broadcasting add"),
    Case("transpose(mul(x, y), perm=[0, 2, 1]) == mul(transpose(x, perm=[0, 2, 1]), transpose(y, perm=[0, 2, 1]))",
         "transpose-mul-3"),
    Case(f"transpose(add(x, b), {T}) == add(transpose(x, {T}), reshape(b, shape=[dim(b, 0), 1])) where rank(b) == 1",
         "transpose-add-vector: a bias becomes a column"),
    Case("reshape(reshape(x, shape=[?a, ?b]), shape=[?c]) == reshape(x, shape=[?c])", "reshape-compose-2-1"),
    Case("relu(reshape(x, shape=[dim(x, 0), dim(x, 1) * dim(x, 2)])) == reshape(relu(x), "
         "shape=[dim(x, 0), dim(x, 1) * dim(x, 2)]) where rank(x) == 3", "relu-reshape-2"),
    Case("reshape(x, shape=[dim(x, 0), dim(x, 1)]) == x where rank(x) == 2", "reshape-identity-2"),
    # --- convolution ---
    Case(f"conv2d(x, add(w1, w2), {SAME3}) == add(conv2d(x, w1, {SAME3}), conv2d(x, w2, {SAME3}))",
         "conv-add-weights: at stride 1, equal output shapes need equal kernel sizes"),
    Case(f"conv2d(add(x1, x2), w, {ANY}, act=none) == add(conv2d(x1, w, {ANY}, act=none), "
         f"conv2d(x2, w, {ANY}, act=none)) where {HW}", "conv-add-input at any stride and padding"),
    Case("conv2d(add(x1, x2), w, stride=[2, 2], pad=[0, 0, 0, 0]) == add(conv2d(x1, w, stride=[2, 2], "
         "pad=[0, 0, 0, 0]), conv2d(x2, w, stride=[2, 2], pad=[0, 0, 0, 0]))", "conv-add-input-unpadded"),
    Case(f"tanh(conv2d(x, w, {DOWN})) == conv2d(x, w, {DOWN}, act=tanh)", "conv-tanh"),
    Case(f"conv2d(x, scalar_mul(w, scale=?s), {VALID}) == scalar_mul(conv2d(x, w, {VALID}), scale=?s)",
         "conv-scalar-weights"),
    Case(f"conv2d(concat(a, b, axis=0), w, {DOWN}, dilation=[2, 2]) == "
         f"concat(conv2d(a, w, {DOWN}, dilation=[2, 2]), conv2d(b, w, {DOWN}, dilation=[2, 2]), axis=0)",
         "conv-concat-batch, dilated"),
    Case(f"conv2d(x, concat(w1, w2, axis=0), concat(b1, b2, axis=0), {SAME3}, act=sigmoid) == "
         f"concat(conv2d(x, w1, b1, {SAME3}, act=sigmoid), conv2d(x, w2, b2, {SAME3}, act=sigmoid), axis=1)",
         "conv-concat-weights-bias, conv-bias-sigmoid, sigmoid-concat"),
    Case("conv2d(x, enlarge(w, kernel=[5, 5]), stride=[1, 1], pad=[2, 2, 2, 2]) == conv2d(x, w, "
         f"{VALID}) where dim(w, 2) == 1, dim(w, 3) == 1", "conv-enlarge to 5x5"),
    Case(f"conv2d(x, const_iconv(channels=dim(x, 1), kernel=[1, 1], groups=1), {VALID}) == x", "conv-identity, 1x1"),
    Case("avgpool2d(x, kernel=[2, 2], stride=[2, 2], pad=[0, 0, 0, 0], count_include_pad=true) == "
         "conv2d(x, const_pool(channels=dim(x, 1), kernel=[2, 2]), stride=[2, 2], pad=[0, 0, 0, 0], "
         "groups=dim(x, 1))", "avgpool-as-conv, strided"),
    Case(f"conv2d(concat(a, b, axis=1), concat(c, d, axis=1), {DOWN}) == add(conv2d(a, c, {DOWN}), "
         f"conv2d(b, d, {DOWN})) where dim(a, 1) == dim(c, 1)", "conv-concat-channels, strided"),
    # --- pooling and normalization ---
    Case(f"maxpool2d(concat(a, b, axis=0), {MAX3}) == concat(maxpool2d(a, {MAX3}), maxpool2d(b, {MAX3}), axis=0)",
         "maxpool2d-concat over the batch"),
    Case(f"relu(maxpool2d(x, {MAX2})) == maxpool2d(relu(x), {MAX2})", "maxpool-relu"),
    Case(f"avgpool2d(concat(a, b, axis=2), {MAX2}) == concat(avgpool2d(a, {MAX2}), avgpool2d(b, {MAX2}), axis=2) "
         "where dim(a, 2) % 2 == 0", "avgpool2d-concat-height"),
    Case("batchnorm(concat(a, b, axis=0), s, t, m, v, epsilon=0.00001) == "
         "concat(batchnorm(a, s, t, m, v, epsilon=0.00001), batchnorm(b, s, t, m, v, epsilon=0.00001), axis=0)",
         "batchnorm-concat-batch"),
]

WRONG: list[Case] = [
    # --- matmul ---
    Case(f"matmul(a, b) == transpose(matmul(transpose(a, {T}), transpose(b, {T})), {T})",
         "(A^T B^T)^T is BA, not AB"),
    Case("matmul(add(a, b), c) == add(matmul(a, c), matmul(b, a))", "the second product has the wrong operand"),
    Case("matmul(scalar_mul(a, scale=2.0), scalar_mul(b, scale=0.25)) == scalar_mul(matmul(a, b), scale=0.25)",
         "one scale dropped"),
    Case("relu(matmul(a, b)) == matmul(relu(a), relu(b))", "relu does not distribute over products"),
    Case("matmul(a, concat(b, c, axis=1)) == concat(matmul(a, c), matmul(a, b), axis=1) "
         "where rank(a) == 2, rank(b) == 2", "column blocks in the wrong order"),
    Case("matmul(concat(a, b, axis=1), concat(c, d, axis=0)) == matmul(a, c) where rank(a) == 2, rank(c) == 2",
         "a block inner product without its second term"),
    # --- element-wise ---
    Case("mul(a, b) == add(a, b)", "product is not sum"),
    Case("mul(add(a, b), add(a, b)) == add(mul(a, a), mul(b, b))", "the cross terms are missing"),
    Case("relu(mul(a, b)) == mul(relu(a), relu(b))", "two negatives make a positive"),
    Case("sigmoid(add(a, b)) == add(sigmoid(a), sigmoid(b))", "sigmoid is not additive"),
    Case("relu(scalar_mul(x, scale=-2.0)) == scalar_mul(relu(x), scale=2.0)", "the sign of the scale is lost"),
    Case("sub(add(a, b), b) == add(a, b)", "b subtracted and ignored"),
    Case("sigmoid(relu(x)) == relu(sigmoid(x))", "sigmoid(0) is 1/2"),
    Case("scalar_mul(add(a, b), scale=2.0) == add(scalar_mul(a, scale=2.0), scalar_mul(b, scale=-2.0))",
         "wrong sign on one term"),
    Case("relu(sub(a, b)) == sub(relu(a), b)", "relu applied to one operand only"),
    Case("mul(sigmoid(x), sigmoid(x)) == sigmoid(mul(x, x))", "sigmoid is not multiplicative"),
    Case("gelu(x, approximate=none) == mul(x, sigmoid(scalar_mul(x, scale=1.702)))",
         "the sigmoid approximation of GELU is not exact"),
    Case("softmax(scalar_mul(x, scale=2.0), axis=1) == softmax(x, axis=1)", "softmax is not scale invariant"),
    # --- concat, split, transpose, reshape, pad ---
    Case("split(concat(a, b, axis=0), axis=0, sizes=[dim(a, 0), dim(b, 0)])[0] == b", "the wrong part"),
    Case("transpose(x, perm=[1, 0, 2]) == transpose(x, perm=[0, 2, 1])", "different permutations of a cube"),
    Case("transpose(transpose(x, perm=[1, 2, 0]), perm=[1, 2, 0]) == transpose(x, perm=[1, 2, 0])",
         "[1, 2, 0] twice is [2, 0, 1]"),
    Case("relu(concat(a, b, axis=0)) == concat(relu(a), b, axis=0)", "relu dropped from one part"),
    Case("concat(a, add(b, c), axis=0) == add(concat(a, b, axis=0), concat(a, c, axis=0))", "a counted twice"),
    Case("add(concat(a, b, axis=1), concat(c, d, axis=1)) == concat(add(a, d), add(b, c), axis=1) "
         "where rank(a) == rank(c), dim(a, 1) == dim(c, 1)", "parts paired crosswise"),
    Case("mul(concat(a, b, axis=0), concat(c, d, axis=0)) == concat(mul(a, d), mul(b, c), axis=0) "
         "where rank(a) == rank(c), dim(a, 0) == dim(c, 0)", "parts paired crosswise"),
    Case("reshape(x, shape=[dim(x, 1), dim(x, 0)]) == transpose(x, perm=[1, 0])", "a reshape is not a transpose"),
    Case("reshape(reshape(x, shape=[?a, ?b]), shape=[?c]) == "
         "reshape(transpose(reshape(x, shape=[?a, ?b]), perm=[1, 0]), shape=[?c])", "the transpose reorders"),
    Case("pad(x, pads=[1, 0, 0, 1], value=0.0) == pad(x, pads=[0, 1, 1, 0], value=0.0)", "padding on other sides"),
    # --- convolution ---
    Case(f"conv2d(x, w, {SAME3}, act=relu) == conv2d(relu(x), w, {SAME3})", "relu before instead of after"),
    Case(f"conv2d(add(x1, x2), w, {SAME3}) == add(conv2d(x1, w, {SAME3}), conv2d(x2, w, {SAME3}))",
         "an input broadcast over height and width is padded differently"),
    Case(f"conv2d(x, add(w1, w2), {ANY}) == add(conv2d(x, w1, {ANY}), conv2d(x, w2, {ANY}))",
         "a broadcast 1x1 kernel reads other cells than a 3x3 one at a large stride"),
    Case(f"conv2d(x, w, b, {VALID}) == add(conv2d(x, w, {VALID}), b)",
         "a bias added along the last axis, not the channels"),
    Case(f"conv2d(x, scalar_mul(w, scale=2.0), {SAME3}, act=relu) == conv2d(x, w, {SAME3}, act=relu)",
         "the scale is lost"),
    # --- pooling and normalization ---
    Case(f"maxpool2d(add(a, b), {MAX2}) == add(maxpool2d(a, {MAX2}), maxpool2d(b, {MAX2}))",
         "max is not additive"),
    Case("avgpool2d(x, kernel=[2, 2], stride=[1, 1], pad=[0, 0, 0, 0]) == "
         "maxpool2d(x, kernel=[2, 2], stride=[1, 1], pad=[0, 0, 0, 0])", "mean is not max"),
    Case("avgpool2d(x, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=false) == "
         "avgpool2d(x, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=true)",
         "the divisor differs at the border"),
    Case("global_avgpool(mul(a, b)) == mul(global_avgpool(a), global_avgpool(b))",
         "the mean of a product is not the product of the means"),
    Case("global_avgpool(concat(a, b, axis=1)) == concat(global_avgpool(b), global_avgpool(a), axis=1)",
         "channels in the wrong order"),
    Case(f"relu(avgpool2d(x, {MAX2})) == avgpool2d(relu(x), {MAX2})", "relu does not commute with a mean"),
    Case("batchnorm(x, s, t, m, v, epsilon=0.001) == batchnorm(x, s, t, m, v, epsilon=0.01)", "another epsilon"),
]

VACUOUS: list[Case] = [
    Case(f"transpose(concat(x, y, axis=0), {T}) == concat(transpose(x, {T}), transpose(y, {T}), axis=0)",
         "the transposed join is on axis 1: the widths cannot match (issue 17)"),
    Case(f"conv2d(x, w, {SAME3}, act=relu) == relu(conv2d(x, w, {VALID}))",
         "a padded and an unpadded convolution differ in size by 2 (issue 17)"),
    Case(f"transpose(concat(a, b, axis=1), {T}) == concat(transpose(a, {T}), transpose(b, {T}), axis=1)",
         "the heights cannot match"),
    Case("concat(split(x, axis=0, sizes=[?m, ?n])[0], split(x, axis=0, sizes=[?m, ?n])[1], axis=1) == x",
         "parts of a row split joined by columns: twice as wide, half as high"),
    Case(f"conv2d(concat(a, b, axis=1), w, {VALID}) == concat(conv2d(a, w, {VALID}), conv2d(b, w, {VALID}), axis=1)",
         "one kernel cannot fit both the joined and the separate inputs"),
    Case(f"conv2d(x, w, {VALID}, groups=2) == conv2d(x, w, {VALID})", "a kernel fits one group count only"),
    Case(f"conv2d(x, enlarge(w, kernel=[3, 3]), {VALID}) == conv2d(x, w, {VALID}) where dim(w, 2) == 1, "
         "dim(w, 3) == 1", "an enlarged kernel without more padding shrinks the output"),
    Case("matmul(a, b) == matmul(b, a) where rank(a) == 2, rank(b) == 2, dim(a, 0) == dim(a, 1) + 1",
         "the products of a non-square matrix both ways differ in size"),
    Case("maxpool2d(x, kernel=[3, 3], stride=[1, 1], pad=[0, 0, 0, 0]) == "
         "maxpool2d(x, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1])", "padding changes the size"),
    Case("split(x, axis=0, sizes=[2, 2])[0] == x", "a part is smaller than the whole"),
    Case("global_avgpool(x) == x where dim(x, 2) > 1", "the pooled height is 1: only the where clause rules it out"),
    Case(f"transpose(x, {T}) == x where dim(x, 0) != dim(x, 1)", "only square matrices keep their shape"),
    Case("reshape(x, shape=[?a, ?b]) == reshape(x, shape=[?a, ?b, 1])", "ranks 2 and 3"),
    Case("matmul(a, concat(b, c, axis=1)) == concat(matmul(a, b), matmul(a, c), axis=0) "
         "where rank(a) == 2, rank(b) == 2, rank(c) == 2", "stacked rows are twice as many"),
    Case("global_avgpool(concat(a, b, axis=1)) == concat(global_avgpool(a), global_avgpool(b), axis=0)",
         "a channel join pooled, against a batch join: twice the batch"),
]
