"""The lab's WideResNet in PyTorch, the same architecture as labkit's (crates/labkit/src/model.rs).

Shared by the benchmark scripts of this directory (a script's own directory is on
sys.path, so `from wideresnet import wide_resnet` works from each of them).
"""
import torch.nn as nn

# Channel sets, as labkit's `--width` names them.
WIDTHS = {"lab": (16, 160, 320, 640), "full": (16, 160, 320, 640), "narrow": (8, 16, 32, 64)}


def parse_widths(text):
    """`lab`, `narrow` or four comma-separated channel counts (labkit's Widths)."""
    if text in WIDTHS:
        return WIDTHS[text]
    parts = text.split(",")
    try:
        values = tuple(int(p.strip()) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 4 or not all(0 < v <= 4096 for v in values):
        raise ValueError(f"width {text!r} is not `lab`, `narrow`, or four channel counts 1..4096 like 8,16,32,64")
    return values


def cbr(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Block(nn.Module):
    def __init__(self, cin, cout, scale):
        super().__init__()
        self.main = nn.Sequential(cbr(cin, cout), nn.Dropout(0.01), cbr(cout, cout))
        self.shortcut = nn.Conv2d(cin, cout, 1) if scale else nn.Identity()

    def forward(self, x):
        return self.main(x) + self.shortcut(x)


def wide_resnet(widths):
    w0, w1, w2, w3 = widths
    return nn.Sequential(
        cbr(1, w0),
        Block(w0, w1, True), Block(w1, w1, False), nn.MaxPool2d(2),
        Block(w1, w2, True), Block(w2, w2, False), nn.MaxPool2d(2),
        Block(w2, w3, True), Block(w3, w3, False), nn.AvgPool2d(7),
        nn.Flatten(), nn.Linear(w3, 10),
    )
