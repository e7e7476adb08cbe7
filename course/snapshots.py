"""Widgets that a saved notebook shows as a picture of their first state until the kernel runs them."""
import base64
import contextlib
import io
import itertools
import uuid

_LIVE = {}  # name -> widgets created under that name in this kernel


def stable_model_id(name: str, index: int = 0) -> str:
    """The widget model id of the index-th widget made under `name`: the same in every run."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    return uuid.uuid5(uuid.NAMESPACE_URL, f"nanoserve-course/{name}/{index}").hex


@contextlib.contextmanager
def stable_widget_ids(name: str):
    """Give every widget made inside the block (children, layouts, styles too) a model id fixed by `name`.

    The chapter's build stores its widgets' state in the notebook under these ids, and a learner's Run All
    makes the same ids again, so the saved outputs and the saved state always agree: a notebook reopened
    after Run All and save draws the widget's first state instead of "Error displaying widget: model not
    found", and a late restore of that state lands on models of the same shape."""
    import ipywidgets

    stable_model_id(name)  # checks the name
    for widget in _LIVE.pop(name, []):  # the cell ran before in this kernel: one live model per id
        widget.close()
    made, counter, original = _LIVE.setdefault(name, []), itertools.count(), ipywidgets.Widget.open

    def open_with_stable_id(self):
        if self.comm is None and self._model_id is None:
            self._model_id = stable_model_id(name, next(counter))
        original(self)
        made.append(self)

    ipywidgets.Widget.open = open_with_stable_id
    try:
        yield
    finally:
        ipywidgets.Widget.open = original


def display_with_snapshot(widget, *, figure=None, text=None) -> None:
    """Display `widget`; a viewer that cannot run it (a notebook just opened) shows `figure` or `text`."""
    from IPython.display import display

    bundle = dict(widget._repr_mimebundle_())
    if figure is not None:  # JupyterLab renders an untrusted output with its richest safe type: this PNG
        buf = io.BytesIO()
        figure.savefig(buf, format="png", bbox_inches="tight")
        bundle["image/png"] = base64.b64encode(buf.getvalue()).decode()
    if text is not None:
        bundle["text/plain"] = text
    display(bundle, raw=True)
