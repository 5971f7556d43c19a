"""HTML sites of the offline web world (docs/world.md): encyclopedia, organisation sites, news.

Page types (paths are absolute on the world server):

* ``/index.html`` -- portal linking the encyclopedia, the news site and every organisation site.
* ``/wiki/index.html`` and ``/wiki/<slug>.html`` -- one encyclopedia page per entity: a lead
  sentence, an infobox table (``| Label | value`` once converted to text) and link lists.
* ``/site/<org>/...`` -- one site per organisation. Depth from ``index.html`` (WebWalkerQA):
  1 ``about.html`` ``team.html`` ``products.html`` ``news.html``; 2 ``team/<person>.html``
  (role, joining year), ``products/<p>.html`` (category, launch year), the two newest news
  articles and ``news/archive-1.html``; 3 ``products/<p>/specs.html`` (price), older articles,
  ``news/archive-2.html``; 4 ``products/<p>/support.html`` (warranty), the oldest articles.
* ``/news/index.html`` and ``/news/<slug>.html`` -- a news site with one article per event
  (the only place besides the organisers' sites stating attendance) and per product launch.

Menus are plain ``<div>`` blocks, not ``<nav>``: :func:`harness.tools.html_text.html_to_text`
drops ``<nav>``, and agents must see the links. No scripts, so both ``visit`` backends see the
same text. Deliberate decisions: joining year, price and warranty appear only on the
organisation site (so WebWalkerQA-style tasks need walking), attendance only in news articles.
"""

from __future__ import annotations

from html import escape

from harness.world.entities import Entity, Fact, Page
from harness.world.subtasks import article

NEWS_SITE = "The Courier"
_STYLE = ("body{font-family:sans-serif;max-width:46em;margin:2em auto}table{border-collapse:collapse}"
          "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}")
# Labels of infobox rows (encyclopedia and organisation sites share them).
LABELS: dict[str, str] = {
    "birth_year": "Born", "birth_city": "Birthplace", "employer": "Employer", "role": "Occupation",
    "joined_year": "Joined", "industry": "Industry", "founded_year": "Founded",
    "headquarters": "Headquarters", "ceo": "Chief executive", "employees": "Employees",
    "products": "Products", "country": "Country", "population": "Population", "city_founded": "Founded",
    "maker": "Maker", "category": "Category", "launch_year": "Launched", "price": "Price",
    "warranty": "Warranty", "host_city": "Host city", "year": "Year", "organiser": "Organiser",
}
NEWS_OLDER = "Older news"
PER_NEWS_PAGE = 2


def _doc(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def _a(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="infobox">{cells}</table>'


def wiki_path(e: Entity) -> str:
    return f"/wiki/{e.slug}.html"


def site_prefix(org: Entity) -> str:
    return f"/site/{org.slug}"


def render_pages(ents: dict[str, Entity], countries: list[str], facts: dict[tuple[str, str], Fact]) -> dict[str, Page]:
    """All pages of the world, keyed by path, in a deterministic order."""
    pages: dict[str, Page] = {}

    def add(path: str, title: str, body: str, site: str, depth: int, fk: list[tuple[str, str]]) -> None:
        assert path not in pages, path
        pages[path] = Page(path, title, _doc(title, body), site, depth, tuple(fk))

    def shown(e: Entity, rel: str) -> str:
        f = facts[(e.id, rel)]
        return escape(f.shown or f.value)

    def link(eid: str) -> str:
        return _a(wiki_path(ents[eid]), ents[eid].name)

    def by(kind: str) -> list[Entity]:
        return [e for e in ents.values() if e.kind == kind]

    cities, orgs, people, products, events = by("city"), by("org"), by("person"), by("product"), by("event")

    # ------------------------------------------------------------------ encyclopedia
    for e in people:
        org = ents[e.attrs["employer"]]
        lead = (f"<p><b>{escape(e.name)}</b> (born {shown(e, 'birth_year')} in {link(e.attrs['birth_city'])}) "
                f"is a {escape(e.attrs['role'])} at {link(org.id)}, {article(org.attrs['industry'])} "
                f"{escape(org.attrs['industry'])} company.</p>")
        rows = [(LABELS["birth_year"], shown(e, "birth_year")), (LABELS["birth_city"], link(e.attrs["birth_city"])),
                (LABELS["employer"], link(org.id)), (LABELS["role"], escape(e.attrs["role"]))]
        add(wiki_path(e), e.name, f"<h1>{escape(e.name)}</h1>\n{lead}\n{_table(rows)}", "wiki", 1,
            [(e.id, r) for r in ("birth_year", "birth_city", "employer", "role")] + [(org.id, "industry")])
    for e in orgs:
        hq = ents[e.attrs["headquarters"]]
        lead = (f"<p><b>{escape(e.name)}</b> is {article(e.attrs['industry'])} "
                f"{escape(e.attrs['industry'])} company founded in {shown(e, 'founded_year')} and headquartered in "
                f"{link(hq.id)}.</p>")
        rows = [(LABELS["industry"], escape(e.attrs["industry"])), (LABELS["founded_year"], shown(e, "founded_year")),
                (LABELS["headquarters"], link(hq.id)), (LABELS["ceo"], link(e.attrs["ceo"])),
                (LABELS["employees"], shown(e, "employees")),
                (LABELS["products"], ", ".join(link(p) for p in e.attrs["products"])),
                ("Website", _a(f"{site_prefix(e)}/index.html", "Official website"))]
        add(wiki_path(e), e.name, f"<h1>{escape(e.name)}</h1>\n{lead}\n{_table(rows)}", "wiki", 1,
            [(e.id, r) for r in ("industry", "founded_year", "headquarters", "ceo", "employees", "products")])
    for e in cities:
        lead = (f"<p><b>{escape(e.name)}</b> is a city in {escape(e.attrs['country'])}, founded in "
                f"{shown(e, 'city_founded')}, with a population of {shown(e, 'population')}.</p>")
        rows = [(LABELS["country"], escape(e.attrs["country"])), (LABELS["population"], shown(e, "population")),
                (LABELS["city_founded"], shown(e, "city_founded"))]
        natives = sorted((p for p in people if p.attrs["birth_city"] == e.id), key=lambda p: p.name)
        hq = sorted((o for o in orgs if o.attrs["headquarters"] == e.id), key=lambda o: o.name)
        evs = sorted((v for v in events if v.attrs["host_city"] == e.id), key=lambda v: v.name)
        body = [f"<h1>{escape(e.name)}</h1>", lead, _table(rows), "<h2>Notable people born here</h2>"]
        body.append("<ul>" + "".join(f"<li>{link(p.id)} (born {p.attrs['birth_year']})</li>" for p in natives) + "</ul>")
        body.append("<h2>Organisations headquartered here</h2>")
        body.append("<ul>" + "".join(f"<li>{link(o.id)}</li>" for o in hq) + "</ul>")
        body.append("<h2>Events held here</h2>")
        body.append("<ul>" + "".join(f"<li>{link(v.id)} ({v.attrs['year']})</li>" for v in evs) + "</ul>")
        fk = [(e.id, r) for r in ("country", "population", "city_founded")]
        fk += [(p.id, "birth_city") for p in natives] + [(p.id, "birth_year") for p in natives]
        add(wiki_path(e), e.name, "\n".join(body), "wiki", 1, fk)
    for e in products:
        lead = (f"<p>The <b>{escape(e.name)}</b> is a {escape(e.attrs['category'])} made by {link(e.attrs['maker'])}, "
                f"launched in {shown(e, 'launch_year')}.</p>")
        rows = [(LABELS["maker"], link(e.attrs["maker"])), (LABELS["category"], escape(e.attrs["category"])),
                (LABELS["launch_year"], shown(e, "launch_year"))]
        add(wiki_path(e), e.name, f"<h1>{escape(e.name)}</h1>\n{lead}\n{_table(rows)}", "wiki", 1,
            [(e.id, r) for r in ("maker", "category", "launch_year")])
    for e in events:
        lead = (f"<p>The <b>{escape(e.name)}</b> was held in {link(e.attrs['host_city'])} in {shown(e, 'year')}, "
                f"organised by {link(e.attrs['organiser'])}.</p>")
        rows = [(LABELS["host_city"], link(e.attrs["host_city"])), (LABELS["year"], shown(e, "year")),
                (LABELS["organiser"], link(e.attrs["organiser"]))]
        add(wiki_path(e), e.name, f"<h1>{escape(e.name)}</h1>\n{lead}\n{_table(rows)}", "wiki", 1,
            [(e.id, r) for r in ("host_city", "year", "organiser")])
    kinds = (("People", people), ("Organisations", orgs), ("Cities", cities), ("Products", products), ("Events", events))
    idx = ["<h1>Encyclopedia</h1>"]
    for label, group in kinds:
        idx.append(f"<h2>{label}</h2><ul>" + "".join(f"<li>{link(x.id)}</li>" for x in sorted(group, key=lambda x: x.name)) + "</ul>")
    add("/wiki/index.html", "Encyclopedia index", "\n".join(idx), "wiki", 0, [])

    # ------------------------------------------------------------------ organisation sites
    for org in orgs:
        pre, site = site_prefix(org), f"site/{org.slug}"
        home = _a(f"{pre}/index.html", "Home")
        menu = '<div class="menu">' + " | ".join(
            _a(f"{pre}/{p}.html", t) for p, t in (("about", "About"), ("team", "Team"), ("products", "Products"), ("news", "News"))
        ) + "</div>"
        add(f"{pre}/index.html", f"{org.name} home", f"<h1>{escape(org.name)}</h1>\n{menu}\n"
            f"<p>Welcome to the official website of {escape(org.name)}.</p>", site, 0, [])
        ceo = ents[org.attrs["ceo"]]
        rows = [(LABELS["industry"], escape(org.attrs["industry"])), (LABELS["founded_year"], shown(org, "founded_year")),
                (LABELS["headquarters"], escape(ents[org.attrs["headquarters"]].name)),
                (LABELS["ceo"], _a(f"{pre}/team/{ceo.slug}.html", ceo.name)),
                (LABELS["employees"], shown(org, "employees"))]
        add(f"{pre}/about.html", f"About {org.name}", f"<div>{home}</div><h1>About {escape(org.name)}</h1>\n{_table(rows)}",
            site, 1, [(org.id, r) for r in ("industry", "founded_year", "headquarters", "ceo", "employees")])
        staff = sorted((p for p in people if p.attrs["employer"] == org.id), key=lambda p: p.name)
        add(f"{pre}/team.html", f"Team of {org.name}", f"<div>{home}</div><h1>Our team</h1><ul>"
            + "".join(f"<li>{_a(f'{pre}/team/{p.slug}.html', p.name)}</li>" for p in staff) + "</ul>",
            site, 1, [(p.id, "employer") for p in staff])
        for p in staff:
            rows = [("Role", escape(p.attrs["role"])), (LABELS["joined_year"], shown(p, "joined_year"))]
            add(f"{pre}/team/{p.slug}.html", f"{p.name} at {org.name}",
                f"<div>{home} | {_a(f'{pre}/team.html', 'Team')}</div><h1>{escape(p.name)}</h1>\n{_table(rows)}",
                site, 2, [(p.id, "role"), (p.id, "joined_year")])
        prods = [ents[x] for x in org.attrs["products"]]
        add(f"{pre}/products.html", f"Products of {org.name}", f"<div>{home}</div><h1>Products</h1><ul>"
            + "".join(f"<li>{_a(f'{pre}/products/{p.slug}.html', p.name)}</li>" for p in prods) + "</ul>",
            site, 1, [(org.id, "products")])
        for p in prods:
            pp = f"{pre}/products/{p.slug}"
            rows = [(LABELS["category"], escape(p.attrs["category"])), (LABELS["launch_year"], shown(p, "launch_year"))]
            add(f"{pp}.html", f"{p.name} by {org.name}", f"<div>{home}</div><h1>{escape(p.name)}</h1>\n{_table(rows)}\n"
                f"<p>{_a(f'{pp}/specs.html', 'Specifications')}</p>", site, 2,
                [(p.id, "category"), (p.id, "launch_year"), (p.id, "maker")])
            # specs/support repeat category and launch year: a misread row gives a plausible wrong value
            specs = _table([(LABELS["price"], shown(p, "price") + " USD"), (LABELS["category"], escape(p.attrs["category"])),
                            (LABELS["launch_year"], shown(p, "launch_year"))])
            add(f"{pp}/specs.html", f"{p.name} specifications", f"<div>{home}</div><h1>{escape(p.name)} specifications</h1>\n"
                f"{specs}\n<p>{_a(f'{pp}/support.html', 'Support')}</p>",
                site, 3, [(p.id, "price"), (p.id, "category"), (p.id, "launch_year")])
            support = _table([(LABELS["warranty"], shown(p, "warranty") + " years"),
                              (LABELS["launch_year"], shown(p, "launch_year"))])
            add(f"{pp}/support.html", f"{p.name} support", f"<div>{home}</div><h1>{escape(p.name)} support</h1>\n{support}",
                site, 4, [(p.id, "warranty"), (p.id, "launch_year")])
        # News: newest first, PER_NEWS_PAGE per listing page, the last listing takes the rest (max depth 4).
        items = [(v.attrs["year"], f"{org.name} hosts {v.name}", v) for v in events if v.attrs["organiser"] == org.id]
        items += [(p.attrs["launch_year"], f"{org.name} launches {p.name}", p) for p in prods]
        items.sort(key=lambda t: (-t[0], t[1]))
        listings = [items[:PER_NEWS_PAGE], items[PER_NEWS_PAGE:2 * PER_NEWS_PAGE], items[2 * PER_NEWS_PAGE:]]
        while len(listings) > 1 and not listings[-1]:
            listings.pop()
        for li, chunk in enumerate(listings):
            path = f"{pre}/news.html" if li == 0 else f"{pre}/news/archive-{li}.html"
            body = [f"<div>{home}</div><h1>News{'' if li == 0 else f' archive {li}'}</h1><ul>"]
            for _, title, x in chunk:
                body.append(f"<li>{_a(f'{pre}/news/{x.slug}.html', title)} ({x.attrs.get('year', x.attrs.get('launch_year'))})</li>")
            body.append("</ul>")
            if li + 1 < len(listings):
                body.append(f"<p>{_a(f'{pre}/news/archive-{li + 1}.html', NEWS_OLDER)}</p>")
            add(path, f"News of {org.name}" if li == 0 else f"News archive {li} of {org.name}", "".join(body), site, li + 1, [])
            for _, title, x in chunk:
                if x.kind == "event":
                    text = (f"{escape(x.name)}, organised by {escape(org.name)}, was held in "
                            f"{escape(ents[x.attrs['host_city']].name)} in {x.attrs['year']}. "
                            f"It drew {shown(x, 'attendance')} visitors.")
                    fk = [(x.id, r) for r in ("host_city", "year", "organiser", "attendance")]
                else:
                    text = (f"In {x.attrs['launch_year']}, {escape(org.name)} launched the {escape(x.name)}, "
                            f"a new {escape(x.attrs['category'])}.")
                    fk = [(x.id, r) for r in ("launch_year", "maker", "category")]
                add(f"{pre}/news/{x.slug}.html", title, f"<div>{home}</div><h1>{escape(title)}</h1>\n<p>{text}</p>",
                    site, li + 2, fk)

    # ------------------------------------------------------------------ news site
    arts = []
    for v in events:
        org, city = ents[v.attrs["organiser"]], ents[v.attrs["host_city"]]
        title = f"{v.name} held in {city.name}"
        text = (f"{escape(v.name)}, organised by {link(org.id)}, was held in {link(city.id)} in {v.attrs['year']}. "
                f"It drew {shown(v, 'attendance')} visitors.")
        arts.append((v.attrs["year"], title, v, text, [(v.id, r) for r in ("host_city", "year", "organiser", "attendance")]))
    for p in products:
        org = ents[p.attrs["maker"]]
        title = f"{p.name} launched by {org.name}"
        text = f"In {p.attrs['launch_year']}, {link(org.id)} launched the {link(p.id)}, a new {escape(p.attrs['category'])}."
        arts.append((p.attrs["launch_year"], title, p, text, [(p.id, r) for r in ("launch_year", "maker", "category")]))
    arts.sort(key=lambda t: (-t[0], t[1]))
    add("/news/index.html", f"{NEWS_SITE} front page", f"<h1>{NEWS_SITE}</h1><ul>"
        + "".join(f"<li>{_a(f'/news/{x.slug}.html', t)} ({y})</li>" for y, t, x, _, _ in arts) + "</ul>", "news", 0, [])
    for y, t, x, text, fk in arts:
        add(f"/news/{x.slug}.html", t, f"<div>{_a('/news/index.html', NEWS_SITE)}</div><h1>{escape(t)}</h1>\n<p>{text}</p>",
            "news", 1, fk)

    # ------------------------------------------------------------------ portal
    body = ["<h1>Offline web</h1><ul>", f"<li>{_a('/wiki/index.html', 'Encyclopedia')}</li>",
            f"<li>{_a('/news/index.html', NEWS_SITE)}</li>"]
    body += [f"<li>{_a(f'{site_prefix(o)}/index.html', o.name + ' website')}</li>" for o in sorted(orgs, key=lambda o: o.name)]
    add("/index.html", "Offline web portal", "".join(body) + "</ul>", "portal", 0, [])
    return pages
