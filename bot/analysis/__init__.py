"""An analysis: the actor of a claimed job, its chain of turns, the card's progress, takeovers."""
