"""On a terminal, reading the base's save for the lock shows a progress line naming the image it saves."""

from __future__ import annotations

from kvbake.bake.adapters.basecapture import capture_base
from tests.unit.bake_project import BASE_IMAGE, engine_with_base
from test_terminal_progress import screen  # noqa: F401  (a fixture: a terminal the progress lines go to)


def test_the_save_step_names_the_saved_image_and_why_it_is_read(screen):
    engine = engine_with_base()
    layers = tuple(engine.require_image(BASE_IMAGE)["RootFS"]["Layers"])
    capture_base(engine, BASE_IMAGE, layers, frozenset())
    drawn = screen.getvalue()
    assert f"save {BASE_IMAGE}" in drawn and "for the lock" in drawn and "done" in drawn
    assert "None" not in drawn
