"""Torch tensors over the client's shared-memory pool.

A tensor that lives in the pool reaches the daemon with no copy: a push
reads it in place and a pull writes it in place. `PoolBlock` carves one
pool allocation into several tensors (64-byte aligned), so that one bucket
of gradients is one contiguous range (one all-reduce).
"""

import math

import torch

import starling

# The element types Starling moves, by torch dtype: (declared name, bytes).
DTYPES = {
    torch.float32: ("float32", 4),
    torch.float16: ("float16", 2),
    torch.bfloat16: ("bfloat16", 2),
}
_ALIGN = 64


def dtype_name(dtype):
    return DTYPES[dtype][0]


def check_dtype(name, tensor):
    if tensor.dtype not in DTYPES:
        raise starling._error(
            "INVALID_ARGUMENT",
            "starling: parameter '%s' is %s; Starling moves float32, "
            "float16 and bfloat16 tensors (convert the model, e.g. "
            "model.float())" % (name, str(tensor.dtype).replace("torch.", "")))


def tensor_arg(name, tensor):
    """The (name, address, bytes, element bytes) tuple the client takes."""
    return (name, tensor.data_ptr(), tensor.numel() * tensor.element_size(),
            tensor.element_size())


class PoolBlock:
    """One pool allocation holding tensors of the given shapes and dtype."""

    def __init__(self, session, shapes, dtype):
        element = torch.empty((), dtype=dtype).element_size()
        self.offsets = []
        offset = 0
        for shape in shapes:
            self.offsets.append(offset)
            nbytes = math.prod(shape) * element
            offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        self.nbytes = max(offset, _ALIGN)
        self.buffer = session.allocate(self.nbytes)
        self.address = self.buffer.address
        # The whole block as bytes; views of it keep `buffer` (and with it
        # the client and its pool) alive.
        self.raw = torch.frombuffer(self.buffer, dtype=torch.uint8,
                                    count=self.nbytes)
        self.tensors = [
            self.raw[o:o + math.prod(s) * element].view(dtype).view(s)
            for o, s in zip(self.offsets, shapes)
        ]
        # The block as elements of `dtype` (padding included, zero).
        self.flat = self.raw.view(dtype)

    @property
    def elements(self):
        return self.flat.numel()
