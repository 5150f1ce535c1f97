"""Sphinx extension: the book's two editions link to each other, page for page.

The English edition is the site's root, built from book/ (_config.yml); the Chinese edition is zh/, built from
book/zh/ (_config_zh.yml, `language: zh_CN`) with the same file names. English `book/NAME.html` and Chinese
`zh/NAME.html` are the same page; each gets a link to the other at the top, and an hreflang link in its head."""

from __future__ import annotations

ZH = "zh"
SITE_PAGES = {"genindex", "search"}  # Sphinx's own pages sit at each edition's root


def counterpart(pagename: str, chinese: bool) -> str:
    """The other edition's page, as a URL relative to this page."""
    up = "../" * pagename.count("/")
    if chinese:
        english = pagename if pagename in SITE_PAGES else f"book/{pagename}"
        return f"{up}../{english}.html"
    return f"{up}{ZH}/{pagename.removeprefix('book/')}.html"


def _add_switch(app, pagename, templatename, context, doctree):
    if "body" not in context:
        return
    chinese = (app.config.language or "").startswith("zh")
    href = counterpart(pagename, chinese)
    lang, label = ("en", "English") if chinese else ("zh-CN", "中文版")
    context["body"] = (f'<p class="ts-edition-switch" style="text-align: right; margin: 0">'
                       f'<a href="{href}" hreflang="{lang}" lang="{lang}">{label}</a></p>\n' + context["body"])
    context["metatags"] = context.get("metatags", "") + f'\n<link rel="alternate" hreflang="{lang}" href="{href}">'


def setup(app):
    app.connect("html-page-context", _add_switch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
