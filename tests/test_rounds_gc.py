"""The round loop's collector: start-up objects frozen while the rounds run, the rounds' cycles freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from flows.rounds import startup_objects_frozen


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_rounds_cycles_are_collected_and_startup_objects_are_unfrozen_after():
    startup = Node()
    startup_ref = weakref.ref(startup)
    with startup_objects_frozen():
        assert gc.get_freeze_count() > 0
        made_in_a_round = Node()
        round_ref = weakref.ref(made_in_a_round)
        del made_in_a_round, startup
        gc.collect()
        assert round_ref() is None  # a round's garbage is collected
        assert startup_ref() is not None  # frozen: left alone while the rounds run
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert startup_ref() is None  # unfrozen: a later collection frees what the run left


def test_unfrozen_when_the_rounds_raise():
    with pytest.raises(KeyboardInterrupt), startup_objects_frozen():
        raise KeyboardInterrupt
    assert gc.get_freeze_count() == 0
