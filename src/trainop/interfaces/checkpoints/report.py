"""What ``load_tf`` did: loaded, transformed, skipped, left at the initial value."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LoadReport"]


@dataclass
class LoadReport:
    """The outcome of ``load_tf``.

    - ``loaded``: ``"<torch name> <- <TF name>"`` for every parameter, slot
      (``"<param>[<slot>]"``), non-slot variable (``"group 0 beta1_power"``) and step counter
      taken from the checkpoint;
    - ``transformed``: those of ``loaded`` that went through a layout other than identity;
    - ``skipped``: TF variables the load did not use (with ``strict=True`` only those it knows
      to be optimizer state when no optimizer was given), and the ones it cannot read
      (``unsupported``: strings, partitioned variables);
    - ``left_at_initial``: parameters, slots and non-slot variables the checkpoint did not
      provide (``strict=False``) or that ``names`` maps to ``None``: as they were, or at the
      initial value the optimizer gives a new slot;
    - ``global_step``: the step read, or ``None``;
    - ``tf_names``: ``{target: TF name}`` of the optimizer state found (slots, masters,
      non-slot variables, the step, the loss scaler), in the form ``names`` accepts: pass
      ``{**names, **report.tf_names}`` to ``save_tf`` to write them under the same names.
    """

    loaded: list[str] = field(default_factory=list)
    transformed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    left_at_initial: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    global_step: int | None = None
    tf_names: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"loaded {len(self.loaded)} ({len(self.transformed)} through a layout), "
                 f"skipped {len(self.skipped)}, left at initial value "
                 f"{len(self.left_at_initial)}, global step {self.global_step}"]
        for title, items in (("skipped", self.skipped), ("left at initial value",
                                                         self.left_at_initial)):
            if items:
                lines.append(f"  {title}: {', '.join(items[:20])}"
                             f"{' ...' if len(items) > 20 else ''}")
        for name, why in self.unsupported.items():
            lines.append(f"  not read: {name} ({why})")
        return "\n".join(lines)
