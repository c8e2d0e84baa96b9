"""SyncBatchNorm: batch normalisation whose statistics are taken over the
batch of every worker, as Horovod's hvd.SyncBatchNorm and PyTorch's
torch.nn.SyncBatchNorm do.

In training, each worker's per-channel count, sum and sum of squares are
all-reduced (one all-reduce of 2C + 1 values per forward), so every worker
normalises with the mean and (biased) variance of the whole global batch
and updates its running statistics with the unbiased variance; the
gradient flows back through the all-reduce (whose gradient is the
all-reduce of the gradients). In evaluation it is plain BatchNorm with the
running statistics. Every worker must run the same forwards in the same
order.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

import starling


class _SumOverWorkers(torch.autograd.Function):

    @staticmethod
    def forward(ctx, tensor):
        from starling.torch import collectives
        return collectives.allreduce_(tensor.detach().clone(),
                                      op=collectives.Sum,
                                      name="SyncBatchNorm")

    @staticmethod
    def backward(ctx, grad):
        from starling.torch import collectives
        return collectives.allreduce_(grad.detach().clone(),
                                      op=collectives.Sum,
                                      name="SyncBatchNorm backward")


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (any input of shape
    (N, C, ...)) with statistics over every worker's batch."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("SyncBatchNorm: expected an input of 2 or more "
                             "dimensions (N, C, ...), got %dD" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or starling.size() == 1:
            return super().forward(input)
        channels = input.shape[1]
        reduce_dims = [0] + list(range(2, input.dim()))
        count = input.new_tensor([input.numel() // channels],
                                 dtype=input.dtype)
        local = torch.cat([
            input.sum(dim=reduce_dims), (input * input).sum(dim=reduce_dims),
            count
        ])
        total = _SumOverWorkers.apply(local)
        n = total[-1]
        mean = total[:channels] / n
        var = total[channels:2 * channels] / n - mean * mean
        if self.track_running_stats:
            with torch.no_grad():
                if self.num_batches_tracked is not None:
                    self.num_batches_tracked.add_(1)
                momentum = (self.momentum if self.momentum is not None else
                            1.0 / float(self.num_batches_tracked))
                unbiased = var * (n / (n - 1).clamp(min=1))
                self.running_mean.mul_(1 - momentum).add_(momentum *
                                                          mean.detach())
                self.running_var.mul_(1 - momentum).add_(momentum *
                                                         unbiased.detach())
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) / torch.sqrt(
            var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
