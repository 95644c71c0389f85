"""Multi-task mixtures (T5 paper, section 3.5.2): rate formulas and the deterministic, resumable sampler."""
import math
import pickle

import numpy as np
import pytest

from c4prep.training.data.mixtures import MixtureError, MixtureSampler, mixing_rates, permute_indices

SIZES = {"a": 1000, "b": 100, "c": 10}


def approx(expected: dict[str, float]):
    return pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_equal_mixing():
    assert mixing_rates(SIZES, "equal") == approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})


def test_examples_proportional_without_and_with_limit():
    # r_m = min(e_m, K) / sum_n min(e_n, K)
    assert mixing_rates(SIZES, "examples_proportional") == approx({"a": 1000 / 1110, "b": 100 / 1110,
                                                                  "c": 10 / 1110})
    assert mixing_rates(SIZES, "examples_proportional", size_limit=500) == approx(
        {"a": 500 / 610, "b": 100 / 610, "c": 10 / 610})
    assert mixing_rates(SIZES, "examples_proportional", size_limit=10) == approx({"a": 1 / 3, "b": 1 / 3,
                                                                                 "c": 1 / 3})


def test_temperature_scaling_on_limited_rates():
    # The limited rates (500, 100, 10) / 610, each raised to 1/T = 1/2, then renormalised.
    total = math.sqrt(500) + math.sqrt(100) + math.sqrt(10)
    rates = mixing_rates(SIZES, "temperature", size_limit=500, temperature=2.0)
    assert rates == approx({"a": math.sqrt(500) / total, "b": 10 / total, "c": math.sqrt(10) / total})
    assert list(rates) == ["a", "b", "c"] and math.isclose(sum(rates.values()), 1.0)
    # T = 1 is examples-proportional; larger T moves towards equal; T -> inf is equal.
    assert mixing_rates(SIZES, "temperature", 500, 1.0) == approx(
        mixing_rates(SIZES, "examples_proportional", 500))
    smallest = [mixing_rates(SIZES, "temperature", None, t)["c"] for t in (1, 2, 4, 8, 1e6)]
    assert smallest == sorted(smallest) and smallest[-1] == pytest.approx(1 / 3, abs=1e-5)
    assert mixing_rates(SIZES, "temperature", None, math.inf) == approx(mixing_rates(SIZES, "equal"))


def test_unsupervised_task_is_just_another_task():
    # The paper's setting: C4 span corruption is orders of magnitude larger than the supervised tasks.
    sizes = {"c4_span_corruption": 365_000_000, "squad": 87_599, "cola": 8_551}
    rates = mixing_rates(sizes, "examples_proportional", size_limit=2**19)
    total = 2**19 + 87_599 + 8_551
    assert rates == approx({"c4_span_corruption": 2**19 / total, "squad": 87_599 / total, "cola": 8_551 / total})
    unlimited = mixing_rates(sizes, "examples_proportional")
    assert unlimited["c4_span_corruption"] > 0.999  # why the paper introduces K
    draws = MixtureSampler(rates, seed=3, sizes=sizes).draws(0, 20_000)[0]
    assert np.bincount(draws, minlength=3) / 20_000 == pytest.approx(list(rates.values()), abs=1e-3)


@pytest.mark.parametrize("kwargs, message", [
    ({"sizes": {}, "strategy": "equal"}, "at least one task"),
    ({"sizes": {"a": 0}, "strategy": "equal"}, "task 'a' has size 0; sizes must be positive integers"),
    ({"sizes": {"a": 1.5}, "strategy": "equal"}, "task 'a' has size 1.5"),
    ({"sizes": SIZES, "strategy": "proportional"}, "unknown mixing strategy 'proportional'; use one of equal, "),
    ({"sizes": SIZES, "strategy": "examples_proportional", "size_limit": 0}, "size_limit must be a positive integer"),
    ({"sizes": SIZES, "strategy": "examples_proportional", "temperature": 2.0}, "only applies to strategy='temperat"),
    ({"sizes": SIZES, "strategy": "equal", "size_limit": 10}, "size_limit does not apply to strategy='equal'"),
    ({"sizes": SIZES, "strategy": "temperature", "temperature": 0.0}, "temperature must be > 0"),
    ({"sizes": SIZES, "strategy": "temperature", "temperature": math.nan}, "temperature must be > 0"),
])
def test_rate_errors(kwargs, message):
    with pytest.raises(MixtureError, match=message.replace("(", r"\(")):
        mixing_rates(**kwargs)


@pytest.fixture(scope="module")
def rates() -> dict[str, float]:
    return mixing_rates(SIZES, "temperature", size_limit=500, temperature=2.0)


def test_empirical_frequencies_match_rates(rates):
    sampler = MixtureSampler(rates, seed=7, sizes=SIZES)
    tasks, _ = sampler.draws(0, 100_000)
    frequencies = np.bincount(tasks, minlength=3) / 100_000
    assert frequencies == pytest.approx(list(rates.values()), abs=1e-3)
    # Stratified blocks: any block-aligned window holds each task within one draw per block of its rate.
    window = tasks[4096 * 5:4096 * 6]
    assert np.abs(np.bincount(window, minlength=3) - 4096 * np.array(list(rates.values()))).max() <= 1
    assert sampler.rates == pytest.approx(rates)


def test_order_within_blocks_is_random(rates):
    tasks, _ = MixtureSampler(rates, seed=7, sizes=SIZES).draws(0, 4096)
    a_runs = np.diff(np.flatnonzero(np.diff(np.r_[0, tasks == 0, 0])))[::2]  # lengths of runs of task "a"
    assert a_runs.max() < 40  # not sorted by task (a would be one run of ~2578)
    # Runs of i.i.d. draws: the mean run length of "a" is about 1 / (1 - r_a).
    assert a_runs.mean() == pytest.approx(1 / (1 - rates["a"]), rel=0.15)


def test_deterministic_and_seeded(rates):
    first = MixtureSampler(rates, seed=11, sizes=SIZES).draws(0, 10_000)
    again = MixtureSampler(rates, seed=11, sizes=SIZES).draws(0, 10_000)
    other = MixtureSampler(rates, seed=12, sizes=SIZES).draws(0, 10_000)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not np.array_equal(first[0], other[0]) and not np.array_equal(first[1], other[1])


def test_example_at_is_a_pure_function_of_the_position(rates):
    reference = MixtureSampler(rates, seed=5, sizes=SIZES, block_size=256)
    tasks, examples = reference.draws(0, 3000)
    expected = [(reference.tasks[t], int(e)) for t, e in zip(tasks, examples)]
    shuffled = MixtureSampler(rates, seed=5, sizes=SIZES, block_size=256)
    order = np.random.default_rng(0).permutation(3000)[:400]  # jumping between blocks: no cache to rely on
    assert [shuffled.example_at(int(i)) for i in order] == [expected[i] for i in order]
    assert [shuffled.task_for(i) for i in range(3000)] == [task for task, _ in expected]
    # Resuming from any position (a fresh sampler, e.g. after a restart) continues the same sequence.
    for start in (0, 255, 256, 1234):
        resumed = MixtureSampler(rates, seed=5, sizes=SIZES, block_size=256).iter_from(start)
        assert [next(resumed) for _ in range(600)] == expected[start:start + 600]
        part_tasks, part_examples = reference.draws(start, start + 700)
        assert [(reference.tasks[t], int(e)) for t, e in zip(part_tasks, part_examples)] == \
            expected[start:start + 700]
    assert all(len(part) == 0 for part in reference.draws(42, 42))


def test_each_epoch_is_a_permutation_and_epochs_differ(rates):
    tasks, examples = MixtureSampler(rates, seed=2, sizes=SIZES).draws(0, 60_000)
    for number, (task, size) in enumerate(SIZES.items()):
        seen = examples[tasks == number]
        epochs = [seen[start:start + size] for start in range(0, len(seen) - size + 1, size)]
        assert len(epochs) >= 5, task
        for epoch in epochs:
            assert sorted(epoch.tolist()) == list(range(size)), task
        assert len({tuple(epoch.tolist()) for epoch in epochs}) == len(epochs), task  # reshuffled every epoch


def test_a_tasks_order_does_not_depend_on_the_other_tasks():
    alone = MixtureSampler({"b": 1.0}, seed=4, sizes={"b": 100}).draws(0, 300)[1]
    tasks, examples = MixtureSampler({"a": 0.5, "b": 0.5}, seed=4, sizes={"a": 7, "b": 100}).draws(0, 600)
    mixed = examples[tasks == 1]
    assert len(mixed) > 250 and np.array_equal(mixed, alone[:len(mixed)])  # b's k-th draw: same example either way


def test_huge_task_random_access():
    sizes = {"c4_span_corruption": 365_000_000, "squad": 87_599}
    sampler = MixtureSampler(mixing_rates(sizes, "examples_proportional", 2**19), seed=0, sizes=sizes)
    task, index = sampler.example_at(10**12)  # far into epoch ~2,000 of squad: no replay of the past
    assert 0 <= index < sizes[task]
    assert sampler.example_at(10**12) == MixtureSampler(sampler.rates, seed=0, sizes=sizes).example_at(10**12)


def test_zero_rate_task_is_never_drawn():
    tasks, _ = MixtureSampler({"a": 0.0, "b": 2.0, "c": 0.0}, seed=0).draws(0, 10_000)
    assert set(tasks.tolist()) == {1}


def test_sampler_pickles(rates):
    sampler = MixtureSampler(rates, seed=9, sizes=SIZES)
    sampler.example_at(5000)  # fills the block cache
    clone = pickle.loads(pickle.dumps(sampler))
    assert [clone.example_at(i) for i in range(100)] == [sampler.example_at(i) for i in range(100)]


def test_sampler_errors(rates):
    with pytest.raises(MixtureError, match="pass sizes= to MixtureSampler"):
        MixtureSampler(rates, seed=0).example_at(3)
    assert MixtureSampler(rates, seed=0).task_for(3) in SIZES  # task choice alone needs no sizes
    with pytest.raises(MixtureError, match=r"sizes and rates name different tasks \(c, d\)"):
        MixtureSampler(rates, seed=0, sizes={"a": 1, "b": 1, "d": 1})
    with pytest.raises(MixtureError, match="rates must be finite, non-negative and not all zero"):
        MixtureSampler({"a": -0.5, "b": 1.5}, seed=0)
    with pytest.raises(MixtureError, match="position must be non-negative"):
        MixtureSampler(rates, seed=0).task_for(-1)
    with pytest.raises(MixtureError, match="task 'a' has size 0"):
        MixtureSampler(rates, seed=0, sizes={"a": 0, "b": 1, "c": 1})


@pytest.mark.parametrize("size", [1, 2, 3, 5, 16, 17, 1000, 4097])
def test_permute_indices_is_a_bijection(size):
    keys = np.arange(1, 7, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    image = permute_indices(np.arange(size), size, keys)
    assert sorted(image.tolist()) == list(range(size))
    if size > 16:
        assert not np.array_equal(image, np.arange(size))


def test_permute_indices_is_roughly_uniform():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=(6, 8000), dtype=np.uint64)  # one key set per trial
    first = permute_indices(np.zeros(8000, dtype=np.int64), 10, keys)  # where position 0 goes, 8000 times
    counts = np.bincount(first, minlength=10)
    assert counts.min() > 650 and counts.max() < 950  # 800 expected each
