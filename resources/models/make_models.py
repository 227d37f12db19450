#!/usr/bin/env python3
"""Makes HookScope's bundled sample models (TorchScript, random weights, seeded).

Run with the Python whose PyTorch HookScope builds on:  .venv/bin/python make_models.py [OUT_DIR]
Each archive carries the input spec it expects as the extra file
'hookscope/input_spec', which HookScope offers as the default input.
"""
import os
import sys

import torch
import torch.nn as nn


class SmallCNN(nn.Module):
    """A LeNet-style classifier for 1x28x28 images (MNIST-sized), 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        return self.fc2(self.relu3(self.fc1(self.flatten(x))))


class SmallMLP(nn.Module):
    """A three-layer perceptron on 64 features, 10 classes."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.act1 = nn.Tanh()
        self.fc2 = nn.Linear(128, 128)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


def save(module, path, input_spec):
    torch.jit.script(module).save(path, _extra_files={"hookscope/input_spec": input_spec})
    print(f"wrote {path} ({os.path.getsize(path)} bytes, input {input_spec})")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    save(SmallCNN().train(), os.path.join(out, "small_cnn.pt"), "8x1x28x28")
    torch.manual_seed(1)
    save(SmallMLP().train(), os.path.join(out, "small_mlp.pt"), "16x64")


if __name__ == "__main__":
    main()
