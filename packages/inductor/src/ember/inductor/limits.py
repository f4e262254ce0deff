"""What the generated code supports: dtypes and the size of iteration-local buffers.

Constants only (no lowering imports), so that a backend can be made, and a graph
loaded from the graph cache built, without importing the lowering stack.
"""

from __future__ import annotations

import torch

#: dtypes the lowerings and the C++ kernels handle (the Triton backend adds half types).
SUPPORTED_DTYPES = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)

#: Largest iteration-local buffer (bytes) a kernel may keep instead of a graph buffer.
PRIVATE_BYTES = 64 * 1024
