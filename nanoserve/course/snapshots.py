"""Widgets that a saved notebook shows as a picture of their first state until the kernel runs them."""
import base64
import io
import uuid

_LIVE = {}  # model id -> the wrapper box displayed under it in this kernel


def stable_model_id(name: str) -> str:
    """The same widget model id for `name` in every run, so a saved notebook's outputs and widget state agree."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    return uuid.uuid5(uuid.NAMESPACE_URL, f"nanoserve-course/{name}").hex


def display_with_snapshot(widget, *, figure=None, text=None, name=None) -> None:
    """Display `widget`; a viewer that cannot run it (a notebook just opened) shows `figure` or `text`.

    With a `name`, the widget is wrapped in a box whose model id is the same in every run: the notebook's
    saved widget state (written when the chapter is built) then holds that id, so reopening a notebook after
    Run All and save shows the widget's first state instead of "Error displaying widget: model not found"."""
    from IPython.display import display

    if name is not None:
        import ipywidgets

        model_id = stable_model_id(name)
        if model_id in _LIVE:  # the cell ran before in this kernel: one live model per id
            _LIVE.pop(model_id).close()
        widget = _LIVE[model_id] = ipywidgets.VBox([widget], model_id=model_id)
    bundle = dict(widget._repr_mimebundle_())
    if figure is not None:  # JupyterLab renders an untrusted output with its richest safe type: this PNG
        buf = io.BytesIO()
        figure.savefig(buf, format="png", bbox_inches="tight")
        bundle["image/png"] = base64.b64encode(buf.getvalue()).decode()
    if text is not None:
        bundle["text/plain"] = text
    display(bundle, raw=True)
