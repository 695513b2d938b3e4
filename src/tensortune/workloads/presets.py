"""Named shapes of the built-in operators, in a module of their own: the registry parses them
and the package exports them, and neither has to import the operators for it."""

from __future__ import annotations

#: Named shapes used in the paper's experiments (ResNet-18 layers, batch 1), BERT layers, and in
#: `studies/`.
PRESETS: dict[str, tuple[str, dict[str, int]]] = {
    "resnet18-c2": ("conv2d", dict(N=1, C=64, H=56, W=56, OC=64, KH=3, KW=3, stride=1, pad=1)),
    "resnet18-c7": ("conv2d", dict(N=1, C=128, H=28, W=28, OC=256, KH=3, KW=3, stride=2, pad=1)),
    "resnet18-c12": ("conv2d", dict(N=1, C=512, H=7, W=7, OC=512, KH=3, KW=3, stride=1, pad=1)),
    "mobilenet-dw": ("depthwise_conv2d", dict(N=1, C=256, H=28, W=28, KH=3, KW=3, stride=1, pad=1)),
    # BERT-large attention scores (16 heads, sequence 512, head size 64) and BERT-base FFN-in
    # for 128 tokens.
    "bert-attention": ("batch_matmul", dict(B=16, M=512, N=512, K=64)),
    "bert-ffn": ("dense_bias_relu", dict(M=128, N=3072, K=768)),
}
