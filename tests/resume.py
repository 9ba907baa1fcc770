"""A trainer resumed from a checkpoint continues exactly as the uninterrupted run: the check both
drafter trainers' tests (DFlash, EAGLE-3) share."""

import torch


def assert_resume_identical(make_trainer, path, steps: int = 6, cut: int = 3):
    """Run `steps` steps straight, and `cut` steps + checkpoint + resume in a fresh trainer + the rest;
    the weights, the AdamW state and the sampler's RNG must be equal tensor for tensor, the counts of
    blocks and labels seen equal. Returns the
    checkpointed trainer and the resumed one."""
    straight = make_trainer()
    for _ in range(steps):
        straight.step()
    first = make_trainer()
    for _ in range(cut):
        first.step()
    first.save_checkpoint(path)
    resumed = make_trainer()
    resumed.load_checkpoint(path)
    assert resumed.step_no == cut
    for _ in range(steps - cut):
        resumed.step()
    for (name, a), b in zip(straight.drafter.state_dict().items(), resumed.drafter.state_dict().values()):
        assert torch.equal(a, b), name
    sa, sb = straight.opt.state_dict()["state"], resumed.opt.state_dict()["state"]
    assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])
    assert torch.equal(straight.gen.get_state(), resumed.gen.get_state())
    assert (straight.blocks_seen, straight.labels_seen) == (resumed.blocks_seen, resumed.labels_seen)
    return first, resumed
