"""Python Jinja2 set up as transformers sets it up for chat templates
(transformers/utils/chat_template_utils.py: _compile_jinja_template and
render_jinja_template), the oracle for specula's Jinja engine.

ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension, a {% generation %} tag that renders its body, transformers'
tojson (json.dumps, no HTML escaping, ensure_ascii=False), raise_exception and
strftime_now (a fixed clock here, for reproducible renders).
"""
import datetime
import json

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2025, 7, 10, 12, 0, 0)
NOW_ISO = "2025-07-10T12:00:00"


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_env(trim=True):
    env = ImmutableSandboxedEnvironment(trim_blocks=trim, lstrip_blocks=trim,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def render(template, context, specials=None, plain=False):
    """apply_chat_template's render: special tokens, then tools/documents/add_generation_prompt
    defaults, then the context. plain: Jinja2's own defaults instead (no trim_blocks or
    lstrip_blocks, the context's variables only). Returns (text, None) or (None, error)."""
    env = make_env(trim=not plain)
    kwargs = dict(specials or {})
    kwargs.update(context)
    if not plain:
        for key, default in (("tools", None), ("documents", None), ("add_generation_prompt", False)):
            kwargs.setdefault(key, default)
    try:
        return env.from_string(template).render(**kwargs), None
    except Exception as e:  # the template raised: specula must fail too
        return None, f"{type(e).__name__}: {e}"
