"""Training scripts with a spike put in on purpose, attached to `hookscope-cli record`, for the
first-mover tests (issue 49): where the spike starts is known, and `explain` must name it.

--fault weights: a 4-block transformer whose blocks.2.mlp.fc1 weights are scaled x30 at --at.
--fault none:    the same transformer, untouched.
--fault batch:   a CNN fed one sample scaled x1000 at --at (the first layer to read it moves),
                 and again at --again if given (two spikes close together).
--fault grad:    a CNN whose loss gains a term on its last layer's weights from --at on: the
                 spike starts in that layer's gradient, not in an activation.
--fault absorbed: a residual MLP (x + fc2(act(norm(fc1(x))))) whose blocks.3.fc1 weights and
                 bias are scaled x40 at --at: that layer's output leaps out of its band, the
                 LayerNorm after it takes the scale away, and the loss does not follow.
The scenario suite's further faults (issue 57; tests/python/first_mover_suite.py lists each
with the layer and step it must be found at):
--fault nan:     the CNN fed one sample with a patch of NaN at --at.
--fault dead:    a bad update at --at pushes conv2's bias far below zero: the ReLU after it dies.
--fault lr:      the learning rate x100 for the one step --at.
--fault attention: the query and key weights of one head of blocks.1's attention x8 at --at:
                 its logits grow 64-fold.
--fault embedding: one row of the embedding table x100 at --at.
--model cnn-bn:  the CNN with a BatchNorm after each convolution (with --fault batch or none);
--model transformer-4h: the transformer with 4 heads of attention (--fault attention's model).
--seed:          another initialisation and other data, the same fault.

The transformer learns to continue a counting sequence (one answer in a hundred random), the
CNN to regress a fixed map of its input; both train --pretrain steps before the recorded steps,
so the spike comes mid-run, once the loss has settled, not in its first fall. The script attaches
first and pretrains with its capture suspended (a busy machine's pretraining cannot make the
viewer wait for the script, nor the script's attach time out).
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import hookscope  # noqa: E402

VOCAB, WIDTH, SEQ = 64, 32, 16


class Attention(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        batch, length = x.shape[:2]
        q, k, v = (t.reshape(batch, length, self.heads, WIDTH // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        weights = torch.softmax(q @ k.transpose(-2, -1) / (WIDTH // self.heads) ** 0.5, dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, length, WIDTH))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.attn = Attention(heads)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.mlp = Mlp()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, heads=1):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block(heads) for _ in range(4)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Cnn(nn.Module):
    def __init__(self, norm=False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        if norm:
            self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        if norm:
            self.bn2 = nn.BatchNorm2d(16)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x, bn1, bn2 = self.conv1(x), getattr(self, "bn1", None), getattr(self, "bn2", None)
        x = self.conv2(self.relu1(bn1(x) if bn1 else x))
        return self.fc(self.flat(self.pool(self.relu2(bn2(x) if bn2 else x))))


class NormedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.norm = nn.LayerNorm(4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.fc2(self.act(self.norm(self.fc1(x))))


class NormedMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, WIDTH)
        self.blocks = nn.ModuleList([NormedBlock() for _ in range(4)])
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# The model each fault is put in (--model chooses another: the clean twins, the batch with BatchNorm).
MODEL_OF = {"none": "transformer", "weights": "transformer", "attention": "transformer-4h", "embedding": "transformer",
            "batch": "cnn", "grad": "cnn", "nan": "cnn", "dead": "cnn", "lr": "cnn", "absorbed": "mlp"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", choices=sorted(MODEL_OF), required=True)
    parser.add_argument("--model", choices=["transformer", "transformer-4h", "cnn", "cnn-bn", "mlp"], default=None,
                        help="the model (default: the one the fault is made for)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--at", type=int, default=30)
    parser.add_argument("--again", type=int, default=None, help="--fault batch: a second bad batch at this step")
    parser.add_argument("--pretrain", type=int, default=150, help="steps trained before the recorded ones")
    parser.add_argument("--detach", action="store_true", help="run without HookScope")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds between attached steps")
    args = parser.parse_args()
    kind = args.model or MODEL_OF[args.fault]

    torch.manual_seed(args.seed)
    # One thread: models this small gain nothing from more, and on a busy machine (CI runs two
    # tests at once on two cores) the threads' contention doubled the script's time.
    torch.set_num_threads(1)
    transformer = kind.startswith("transformer")
    absorbed = kind == "mlp"
    model = (Transformer(heads=4 if kind == "transformer-4h" else 1) if transformer else NormedMlp() if absorbed
             else Cnn(norm=kind == "cnn-bn"))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2 if transformer else 3e-3)
    target = torch.nn.Linear(3, 10)  # what the CNN learns: a fixed map of its input's mean colour
    target_mlp = torch.nn.Linear(8, 1)  # what the residual MLP learns
    for p in list(target.parameters()) + list(target_mlp.parameters()):
        p.requires_grad_(False)
    # Attached before anything runs; the viewer may take long to accept on a busy machine.
    hs = None if args.detach else hookscope.attach(model, optimizer, wait=True, timeout=600)
    if hs is not None:
        hs.suspend()  # the pretraining: nothing captured, no step counted
    data = torch.Generator().manual_seed(1 + 1000 * args.seed)
    for step in range(-args.pretrain, args.steps):
        if step == 0 and hs is not None:
            hs.resume()
        if transformer:
            start = torch.randint(0, VOCAB, (32, 1), generator=data)
            tokens = (start + torch.arange(SEQ + 1)) % VOCAB
            x, y = tokens[:, :-1], tokens[:, 1:].clone()
            noise = torch.rand(y.shape, generator=data) < 0.01  # one answer in a hundred random: the loss settles on a floor
            y[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=data)
        elif absorbed:
            x = torch.randn(32, 8, generator=data)
            y = target_mlp(x)
        else:
            x = torch.randn(16, 3, 16, 16, generator=data)
            y = target(x.mean(dim=(2, 3)))
        if step == args.at and args.fault == "weights":
            with torch.no_grad():
                model.blocks[2].mlp.fc1.weight.mul_(30)
        if step == args.at and args.fault == "absorbed":
            with torch.no_grad():
                model.blocks[3].fc1.weight.mul_(40)
                model.blocks[3].fc1.bias.mul_(40)
        if step in (args.at, args.again) and args.fault == "batch":
            x = x.clone()
            x[3] *= 1000
        if step == args.at and args.fault == "nan":
            x = x.clone()
            x[3, :, 4:8, 4:8] = float("nan")
        if step == args.at and args.fault == "dead":
            with torch.no_grad():
                model.conv2.bias.sub_(100)
        if step == args.at and args.fault == "attention":
            with torch.no_grad():  # head 0's rows of the query and of the key
                width = WIDTH // model.blocks[1].attn.heads
                rows = torch.cat([torch.arange(width), WIDTH + torch.arange(width)])
                model.blocks[1].attn.qkv.weight[rows] *= 8
                model.blocks[1].attn.qkv.bias[rows] *= 8
        if step == args.at and args.fault == "embedding":
            with torch.no_grad():
                model.embed.weight[7] *= 100
        out = model(x)
        if transformer:
            loss = nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
        else:
            loss = nn.functional.mse_loss(out, y)
        if args.fault == "grad" and step >= args.at:
            loss = loss + 10 * model.fc.weight.pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        spiked_lr = step == args.at and args.fault == "lr"
        for group in optimizer.param_groups if spiked_lr else ():
            group["lr"] *= 100
        optimizer.step()
        for group in optimizer.param_groups if spiked_lr else ():
            group["lr"] /= 100
        if hs is not None and step >= 0:
            time.sleep(args.sleep)
            try:
                hs.step(loss)
            except hookscope.Stopped as stopped:  # a breakpoint of the recorder's (--break)
                print("stopped at step %d: %s" % (step, stopped), flush=True)
                sys.exit(7)
        if args.detach:
            print("loss %d %.5f" % (step, loss.item()))
    if hs is not None:
        hs.close()
    print("finished", args.steps, "steps", flush=True)


if __name__ == "__main__":
    main()
