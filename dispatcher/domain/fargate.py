"""Fargate's task sizes: the cpu/memory pairs it accepts and the ephemeral storage range.

Task CPU and memory (Linux), as the ECS documentation lists them:
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/fargate-tasks-services.html#fargate-tasks-size
and, word for word the same, the ``cpu``/``memory`` parameters of RegisterTaskDefinition:
https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RegisterTaskDefinition.html

======================  ==================================================================
cpu (units)             memory (MiB)
======================  ==================================================================
256 (.25 vCPU)          512, 1024, 2048
512 (.5 vCPU)           1024, 2048, 3072, 4096
1024 (1 vCPU)           2048 to 8192 in 1024 steps
2048 (2 vCPU)           4096 to 16384 in 1024 steps
4096 (4 vCPU)           8192 to 30720 in 1024 steps
8192 (8 vCPU)           16384 to 61440 in 4096 steps (16-60 GB in 4 GB steps; Linux 1.4.0+)
16384 (16 vCPU)         32768 to 122880 in 8192 steps (32-120 GB in 8 GB steps; Linux 1.4.0+)
======================  ==================================================================

Ephemeral storage (``EphemeralStorage.sizeInGiB``): 21 to 200 GiB, Linux platform 1.4.0+.
https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_EphemeralStorage.html

The same values apply to a RunTask's task-level ``overrides`` (``cpu`` and ``memory`` as
strings, ``ephemeralStorage``), which is how a job's resources reach its task:
https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_TaskOverride.html

Pure data and checks: no I/O, nothing else of the project.
"""

from __future__ import annotations

from typing import Literal, get_args

DOC_URL = ("https://docs.aws.amazon.com/AmazonECS/latest/developerguide/"
           "fargate-tasks-services.html#fargate-tasks-size")

CpuUnits = Literal[256, 512, 1024, 2048, 4096, 8192, 16384]

# (first, last, step) in MiB per cpu value; 256 and 512 list their values as steps of one
# size each (512 MiB is the only value off the 1 GiB grid).
_RANGES: dict[int, tuple[int, int, int]] = {
    1024: (2048, 8192, 1024),
    2048: (4096, 16384, 1024),
    4096: (8192, 30720, 1024),
    8192: (16384, 61440, 4096),
    16384: (32768, 122880, 8192),
}

#: Every memory size (MiB) Fargate accepts with each cpu value (units).
CPU_MEMORY: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: (1024, 2048, 3072, 4096),
    **{cpu: tuple(range(first, last + 1, step)) for cpu, (first, last, step) in _RANGES.items()},
}
CPU_VALUES: tuple[int, ...] = tuple(CPU_MEMORY)
MIN_MEMORY = min(m for sizes in CPU_MEMORY.values() for m in sizes)
MAX_MEMORY = max(m for sizes in CPU_MEMORY.values() for m in sizes)

MIN_EPHEMERAL_STORAGE_GIB = 21
MAX_EPHEMERAL_STORAGE_GIB = 200

assert get_args(CpuUnits) == CPU_VALUES, "CpuUnits and CPU_MEMORY must list the same values"


def _or_list(values: tuple[int, ...]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def memory_choices(cpu: int) -> str:
    """The memory sizes ``cpu`` takes, in words: ``512, 1024 or 2048 MiB`` or
    ``8192 to 30720 MiB in steps of 1024``."""
    if cpu in _RANGES:
        first, last, step = _RANGES[cpu]
        return f"{first} to {last} MiB in steps of {step}"
    return f"{_or_list(CPU_MEMORY[cpu])} MiB"


def cpus_for(memory: int) -> tuple[int, ...]:
    """The cpu values that take ``memory`` MiB (none if it is no Fargate size)."""
    return tuple(cpu for cpu, sizes in CPU_MEMORY.items() if memory in sizes)


def all_choices() -> str:
    """Every valid pair, in one line."""
    return "; ".join(f"cpu {cpu}: {memory_choices(cpu)}" for cpu in CPU_VALUES)


def size_problem(cpu: int | None, memory: int | None) -> str | None:
    """Why a task-level cpu/memory pair is not one Fargate runs, or None if it is (or neither
    is given).

    The rule for one without the other: both or neither. A task-level override of one alone
    is combined with the task definition's other value, which the message cannot know, so
    a job naming only one could ask for a size Fargate refuses at every launch.
    """
    if cpu is None and memory is None:
        return None
    if cpu is not None and cpu not in CPU_MEMORY:
        return f"cpu must be one of {_or_list(CPU_VALUES)} units; got {cpu}"
    if cpu is None:
        assert memory is not None
        fits = cpus_for(memory)
        if not fits:
            return f"memory {memory} MiB is no Fargate size (valid: {all_choices()})"
        return (f"memory {memory} MiB needs cpu too (give both): it takes cpu "
                f"{_or_list(fits)}")
    if memory is None:
        return f"cpu {cpu} needs memory too (give both): it takes memory {memory_choices(cpu)}"
    if memory not in CPU_MEMORY[cpu]:
        return f"cpu {cpu} takes memory {memory_choices(cpu)}; got {memory}"
    return None
