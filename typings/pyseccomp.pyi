# Types of the part of pyseccomp the server uses (the package ships none): `skills.executors.seccomp`
# generates the jails' system-call filter with it.
from typing import IO, Any

KILL_PROCESS: int
ALLOW: int
MASKED_EQ: int

def ERRNO(x: int) -> int: ...

class Arch:
    NATIVE: int

class Attr:
    ACT_BADARCH: int

class Arg:
    def __init__(self, arg: int, op: int, data_a: int, data_b: int = 0) -> None: ...

class SyscallFilter:
    def __init__(self, defaction: int) -> None: ...
    def set_attr(self, attr: int, value: int) -> None: ...
    def add_rule(self, action: int, syscall: int | str, *args: Arg) -> None: ...
    def export_bpf(self, file: IO[Any]) -> None: ...
    def export_pfc(self, file: IO[Any]) -> None: ...

def resolve_syscall(arch: int, syscall: str) -> int: ...
