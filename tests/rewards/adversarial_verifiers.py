"""Verifiers that misbehave on purpose, to prove the pool survives them (imported by path)."""

from __future__ import annotations

import os
import time

from rewards.base import Verdict, Verifier


class Hang(Verifier):
    """Spins forever when the answer says "hang"; a pure-Python busy loop, no sleep."""

    needs_answer = False  # the tests give no ground truth

    def verify(self, extracted, answer, options):
        if extracted == "hang":
            while True:
                time.monotonic()
        return Verdict(1.0)


class Crash(Verifier):
    """Exits the process abruptly (as a segfault would) on "die", recurses on "recurse",
    allocates without bound on "oom"."""

    needs_answer = False  # the tests give no ground truth

    def verify(self, extracted, answer, options):
        if extracted == "die":
            os._exit(139)
        if extracted == "recurse":
            return self.verify(extracted, answer, options)
        if extracted == "oom":
            hog = []
            while True:
                hog.append(bytearray(64 * 1024 * 1024))
        return Verdict(1.0)


class OutOfRange(Verifier):
    """Returns a reward outside [0, 1], which must be reported, never passed on."""

    needs_answer = False  # the tests give no ground truth

    def verify(self, extracted, answer, options):
        return Verdict(float(extracted))
