"""The LeNet of the PyTorch examples (train.py, ddp_train.py) and of
tests/bench/ddp_bench.sh: two 5x5 convolutions (6 and 16 channels), each
ReLU and 2x2 max-pooled, then 400-120-84-10 fully connected; 61,706
parameters for 1 x 28 x 28 inputs."""

import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)   # -> 6 x 28 x 28, pool -> 14
        self.conv2 = nn.Conv2d(6, 16, 5)             # -> 16 x 10 x 10, pool -> 5
        self.fc1, self.fc2, self.fc3 = (nn.Linear(400, 120), nn.Linear(120, 84),
                                        nn.Linear(84, 10))

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))
