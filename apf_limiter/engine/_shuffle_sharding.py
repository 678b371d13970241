"""Shuffle sharding: the Kubernetes dealer that turns a flow hash into a hand of queues.

A hand is dealt by reading the unsigned 64-bit hash as a mixed-radix number with digits in
bases ``deck, deck - 1, ..., deck - hand + 1`` (each digit is the rank of a card among the cards
not dealt yet), then turning each rank into a card. The result is bit-for-bit the hand that
Kubernetes deals for the same ``(deck_size, hand_size, hash)``; for hashes uniformly spread over
one period ``deck! / (deck - hand)!`` every ordered hand appears exactly once.
"""

from __future__ import annotations

import math
from typing import Final

MAX_HASH_BITS: Final = 60
"""Entropy a hand may consume; the 4 spare bits of 64 keep the last card's bias at most 32:33."""

MAX_DECK_SIZE: Final = 1 << 26
"""Largest supported deck (number of queues)."""

_HASH_MASK: Final = (1 << 64) - 1


def required_entropy_bits(deck_size: int, hand_size: int) -> int:
    """Return the hash bits a hand consumes: ``ceil(log2(deck_size) * hand_size)``.

    Computed in float64 like Kubernetes, so the boundary cases agree with it.

    Args:
        deck_size: Number of cards (queues); must be positive.
        hand_size: Cards per hand.

    Returns:
        The number of bits, e.g. 60 for ``(1024, 6)`` and 72 for ``(512, 8)``.
    """
    return math.ceil(math.log2(deck_size) * hand_size)


class Dealer:
    """Deals hands of distinct cards from a deck, exactly like Kubernetes' shuffle sharding.

    Args:
        deck_size: Number of cards (queues), ``1..2**26``.
        hand_size: Cards per hand, ``1..deck_size``, with
            ``required_entropy_bits(deck_size, hand_size) <= 60``.

    Raises:
        ValueError: With the Kubernetes message of the first rule broken, in this order:
            non-positive sizes, hand larger than deck, deck too large, too much entropy.

    Example:
        >>> Dealer(8, 3).deal(7)
        [7, 0, 1]
    """

    __slots__ = ("_deck_size", "_hand_size", "_later_radices")

    def __init__(self, deck_size: int, hand_size: int) -> None:
        if deck_size <= 0 or hand_size <= 0:
            raise ValueError(f"deckSize {deck_size} or handSize {hand_size} is not positive")
        if hand_size > deck_size:
            raise ValueError(f"handSize {hand_size} is greater than deckSize {deck_size}")
        if deck_size > MAX_DECK_SIZE:
            raise ValueError(f"deckSize {deck_size} is impractically large")
        if required_entropy_bits(deck_size, hand_size) > MAX_HASH_BITS:
            raise ValueError(
                f"required entropy bits of deckSize {deck_size} and handSize {hand_size} "
                f"is greater than {MAX_HASH_BITS}"
            )
        self._deck_size = deck_size
        self._hand_size = hand_size
        # The first digit needs no fix-up, so deal() peels it off and loops over the rest.
        self._later_radices = tuple(range(deck_size - 1, deck_size - hand_size, -1))

    @property
    def deck_size(self) -> int:
        """Number of cards in the deck (the number of queues)."""
        return self._deck_size

    @property
    def hand_size(self) -> int:
        """Number of cards in each hand."""
        return self._hand_size

    def deal(self, hash_value: int) -> list[int]:
        """Deal the hand of ``hash_value``.

        Args:
            hash_value: The flow hash; taken modulo ``2**64`` (so negative values wrap like a
                Go ``uint64`` conversion).

        Returns:
            ``hand_size`` distinct cards in ``[0, deck_size)``, in deal order.
        """
        # Hot path: one call per queued request, so locals only and two small lists.
        h = hash_value & _HASH_MASK
        deck = self._deck_size
        rank = h % deck
        h //= deck
        # Raw ranks, most recent first: each later rank is lifted past every earlier rank it
        # reaches, visiting them from the most recent back to the first.
        earlier_ranks = [rank]
        hand = [rank]
        for radix in self._later_radices:
            rank = h % radix
            h //= radix
            card = rank
            for earlier in earlier_ranks:
                if card >= earlier:
                    card += 1
            earlier_ranks.insert(0, rank)
            hand.append(card)
        return hand

    def __repr__(self) -> str:
        return f"Dealer(deck_size={self._deck_size}, hand_size={self._hand_size})"
