"""Tests of the shuffle-sharding Dealer against the Kubernetes vectors (shufflesharding_test.go)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apf_limiter.engine._shuffle_sharding import (
    MAX_DECK_SIZE,
    MAX_HASH_BITS,
    Dealer,
    required_entropy_bits,
)

# -- TestRequiredEntropyBits ----------------------------------------------------------------------


@pytest.mark.parametrize(("deck", "hand", "bits"), [(1024, 6, 60), (512, 8, 72)])
def test_required_entropy_bits_kubernetes_vectors(deck: int, hand: int, bits: int) -> None:
    assert required_entropy_bits(deck, hand) == bits


def test_required_entropy_bits_rounds_up() -> None:
    # log2(1000) * 2 = 19.93...
    assert required_entropy_bits(1000, 2) == 20
    assert required_entropy_bits(1, 15) == 0


def test_constants() -> None:
    assert MAX_HASH_BITS == 60
    assert MAX_DECK_SIZE == 67_108_864


# -- TestNewDealer --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deck", "hand", "message"),
    [
        (-100, 8, "deckSize -100 or handSize 8 is not positive"),
        (100, 0, "deckSize 100 or handSize 0 is not positive"),
        (100, 101, "handSize 101 is greater than deckSize 100"),
        (134217728, 2, "deckSize 134217728 is impractically large"),
        (512, 8, "required entropy bits of deckSize 512 and handSize 8 is greater than 60"),
    ],
)
def test_new_dealer_kubernetes_errors(deck: int, hand: int, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Dealer(deck, hand)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("deck", "hand", "message"),
    [
        # Several rules broken at once: the first one in the documented order wins.
        (0, -1, "deckSize 0 or handSize -1 is not positive"),
        (-5, 10, "deckSize -5 or handSize 10 is not positive"),
        (134217728, 134217729, "handSize 134217729 is greater than deckSize 134217728"),
        (MAX_DECK_SIZE + 1, 3, "deckSize 67108865 is impractically large"),
    ],
)
def test_new_dealer_checks_in_documented_order(deck: int, hand: int, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Dealer(deck, hand)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("deck", "hand"), [(1024, 6), (MAX_DECK_SIZE, 2), (10_000_000, 2), (1, 1), (15, 15)]
)
def test_new_dealer_accepts_valid_sizes(deck: int, hand: int) -> None:
    dealer = Dealer(deck, hand)
    assert (dealer.deck_size, dealer.hand_size) == (deck, hand)
    assert repr(dealer) == f"Dealer(deck_size={deck}, hand_size={hand})"


def test_sizes_are_read_only() -> None:
    dealer = Dealer(8, 3)
    with pytest.raises(AttributeError):
        dealer.deck_size = 9  # type: ignore[misc]
    with pytest.raises(AttributeError):
        dealer.hand_size = 2  # type: ignore[misc]


# -- dealer vectors and hash handling -------------------------------------------------------------


@pytest.mark.parametrize(
    ("deck", "hand", "hash_value", "expected"),
    [
        (6, 6, 0, [0, 1, 2, 3, 4, 5]),
        (8, 3, 1, [1, 0, 2]),
        (8, 3, 7, [7, 0, 1]),
    ],
)
def test_deal_vectors(deck: int, hand: int, hash_value: int, expected: list[int]) -> None:
    assert Dealer(deck, hand).deal(hash_value) == expected


def test_deal_compares_against_raw_remainders() -> None:
    # Remainders (1, 1, 1): comparing the last rank against the adjusted cards (2, then 1) would
    # deal card 2 twice; against the raw remainders it becomes 3.
    assert Dealer(8, 3).deal(1 + 8 * (1 + 7 * 1)) == [1, 2, 3]
    # Remainders (1, 0, 0): visiting the earlier remainders first-to-last instead of
    # last-to-first would deal card 1 twice.
    assert Dealer(8, 3).deal(1) == [1, 0, 2]
    # Remainders (2, 6, 0) in (8, 3) and (2, 3, 4, 5) in (50, 4), worked by hand.
    assert Dealer(8, 3).deal(2 + 8 * 6) == [2, 7, 0]
    assert Dealer(50, 4).deal(2 + 50 * (3 + 49 * (4 + 48 * 5))) == [2, 4, 6, 8]


def test_hash_taken_modulo_2_pow_64() -> None:
    dealer = Dealer(128, 6)
    rng = random.Random(20240501)
    for _ in range(200):
        h = rng.getrandbits(64)
        assert dealer.deal(h + (1 << 64)) == dealer.deal(h)
        assert dealer.deal(h - (1 << 64)) == dealer.deal(h)
    assert dealer.deal(-1) == dealer.deal((1 << 64) - 1)


def test_every_ordered_hand_once_per_period_6_3() -> None:
    dealer = Dealer(6, 3)
    hands = [tuple(dealer.deal(h)) for h in range(6 * 5 * 4)]
    assert len(set(hands)) == 120
    assert all(len(set(hand)) == 3 and all(0 <= c < 6 for c in hand) for hand in hands)


# -- TestCardDuplication --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deck", "hand"), [(4, 4), (8, 8), (10, 10), (12, 12), (128, 8), (256, 7), (512, 6)]
)
def test_card_duplication(deck: int, hand: int) -> None:
    dealer = Dealer(deck, hand)
    rng = random.Random(deck * 100 + hand)
    for _ in range(2000):
        cards = dealer.deal(rng.getrandbits(64))
        assert len(cards) == hand
        assert all(0 <= card < deck for card in cards)
        assert len(set(cards)) == hand


# -- TestUniformDistribution ----------------------------------------------------------------------
#
# Kubernetes deals every hash in [0, hashMax), sorts each hand and requires each observed hand's
# count to lie in [h! * floor(hashMax / ff), h! * ceil(hashMax / ff)], ff = deck! / (deck - hand)!.
# Dealing millions of hashes in pure Python takes seconds, so: (128, 3) and (50, 4) are run
# literally over their full period (hashMax = ff); (64, 3) with hashMax = 2**22 is computed from
# one full period plus the trailing partial period, which yields the identical histogram because
# a hand depends only on the hash modulo ff (checked separately below).


def _sorted_hand_counts(dealer: Dealer, hashes: Iterable[int]) -> bytearray:
    """Count sorted hands, each encoded as a base-deck number (counts stay below 256 here)."""
    deck = dealer.deck_size
    deal = dealer.deal
    counts = bytearray(deck**dealer.hand_size)
    for h in hashes:
        code = 0
        for card in sorted(deal(h)):
            code = code * deck + card
        counts[code] += 1
    return counts


def _falling_factorial(deck: int, hand: int) -> int:
    return math.perm(deck, hand)


def _assert_uniform(counts: Iterable[int], deck: int, hand: int, low: int, high: int) -> None:
    observed = [c for c in counts if c]
    assert len(observed) == math.comb(deck, hand)
    assert low <= min(observed)
    assert max(observed) <= high


def test_uniform_distribution_128_3_full_period() -> None:
    dealer = Dealer(128, 3)
    hash_max = _falling_factorial(128, 3)
    assert hash_max == 2_048_256
    counts = _sorted_hand_counts(dealer, range(hash_max))
    _assert_uniform(counts, 128, 3, 6, 6)


@pytest.mark.slow
def test_uniform_distribution_50_4_full_period() -> None:
    dealer = Dealer(50, 4)
    hash_max = _falling_factorial(50, 4)
    assert hash_max == 5_527_200
    counts = _sorted_hand_counts(dealer, range(hash_max))
    _assert_uniform(counts, 50, 4, 24, 24)


def test_hand_depends_only_on_hash_modulo_period() -> None:
    rng = random.Random(64_3)
    for deck, hand in [(64, 3), (50, 4), (128, 6)]:
        dealer = Dealer(deck, hand)
        period = _falling_factorial(deck, hand)
        for _ in range(500):
            h = rng.getrandbits(64)
            assert dealer.deal(h) == dealer.deal(h % period)


def test_uniform_distribution_64_3_hash_max_2_pow_22() -> None:
    dealer = Dealer(64, 3)
    ff = _falling_factorial(64, 3)
    hash_max = 1 << (math.ceil(math.log2(ff)) + 4)
    assert hash_max == 4_194_304
    full_periods, partial = divmod(hash_max, ff)
    once = _sorted_hand_counts(dealer, range(ff))
    tail = _sorted_hand_counts(dealer, range(partial))
    counts = [full_periods * a + b for a, b in zip(once, tail, strict=True)]
    low = math.factorial(3) * (hash_max // ff)
    high = math.factorial(3) * -(-hash_max // ff)
    assert (low, high) == (96, 102)
    _assert_uniform(counts, 64, 3, low, high)
    # Both bounds are reached: the partial period holds some but not all orders of a hand.
    assert {min(c for c in counts if c), max(counts)} == {96, 102}


# -- properties -----------------------------------------------------------------------------------


def _unrank(deck: int, hand: int, hash_value: int) -> list[int]:
    """Independent formulation: each digit is the rank among the cards not dealt yet."""
    h = hash_value % (1 << 64)
    dealt: list[int] = []
    for radix in range(deck, deck - hand, -1):
        card = h % radix
        h //= radix
        for used in sorted(dealt):
            if card >= used:
                card += 1
        dealt.append(card)
    return dealt


@st.composite
def _dealer_sizes(draw: st.DrawFn) -> tuple[int, int]:
    deck = draw(st.integers(min_value=1, max_value=MAX_DECK_SIZE))
    max_hand = min(deck, 15)
    hand = draw(st.integers(min_value=1, max_value=max_hand))
    while required_entropy_bits(deck, hand) > MAX_HASH_BITS:
        hand -= 1
    return deck, hand


@given(sizes=_dealer_sizes(), hash_value=st.integers(min_value=-(1 << 70), max_value=1 << 70))
def test_deal_property(sizes: tuple[int, int], hash_value: int) -> None:
    deck, hand = sizes
    cards = Dealer(deck, hand).deal(hash_value)
    assert len(cards) == hand
    assert len(set(cards)) == hand
    assert all(0 <= card < deck for card in cards)
    assert cards == _unrank(deck, hand, hash_value)
