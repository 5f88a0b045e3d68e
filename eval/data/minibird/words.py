"""Word lists and small deterministic helpers for the minibird row generators.

Every helper takes the caller's ``random.Random`` so a database is a pure function of
its seed; nothing here iterates over a set or reads the clock.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Mapping, Sequence

FIRST_NAMES = (
    "Ada",
    "Ahmed",
    "Aiko",
    "Alba",
    "Amara",
    "Anders",
    "Ana",
    "Bao",
    "Beatriz",
    "Boris",
    "Carmen",
    "Chen",
    "Chloé",
    "Dario",
    "Dmitri",
    "Elena",
    "Emeka",
    "Farah",
    "Felix",
    "Giulia",
    "Hana",
    "Hugo",
    "Ines",
    "Ivan",
    "Jamal",
    "Jana",
    "Jonas",
    "José",
    "Kai",
    "Kamala",
    "Lars",
    "Leila",
    "Liam",
    "Lucía",
    "Mateo",
    "Maya",
    "Mei",
    "Nadia",
    "Noah",
    "Olga",
    "Omar",
    "Pablo",
    "Priya",
    "Rafael",
    "Renée",
    "Rosa",
    "Sami",
    "Sara",
    "Sven",
    "Tariq",
    "Tomás",
    "Uma",
    "Viktor",
    "Wen",
    "Yara",
    "Yusuf",
    "Zoë",
    "Zara",
    "Erik",
    "Lena",
)
LAST_NAMES = (
    "Abbott",
    "Alvarez",
    "Andersen",
    "Baker",
    "Banerjee",
    "Becker",
    "Bianchi",
    "Brooks",
    "Castro",
    "Chen",
    "Cohen",
    "Costa",
    "Dubois",
    "Edwards",
    "Fischer",
    "Flores",
    "García",
    "Gupta",
    "Hansen",
    "Hughes",
    "Ibrahim",
    "Ito",
    "Jensen",
    "Kaur",
    "Kim",
    "Kowalski",
    "Larsen",
    "Lee",
    "Lopez",
    "Mensah",
    "Moreau",
    "Müller",
    "Nakamura",
    "Novak",
    "Okafor",
    "Olsen",
    "Patel",
    "Perez",
    "Petrov",
    "Quinn",
    "Rossi",
    "Santos",
    "Schmidt",
    "Silva",
    "Singh",
    "Sato",
    "Tanaka",
    "Torres",
    "Ueda",
    "Vargas",
    "Wagner",
    "Walsh",
    "Weber",
    "Wong",
    "Yilmaz",
    "Young",
    "Zhang",
    "Ziegler",
    "Byrne",
    "Ortiz",
)
CITIES = (
    "Ashford",
    "Brookvale",
    "Cedar Falls",
    "Dunmore",
    "Eastwick",
    "Fairhaven",
    "Glenrock",
    "Harborview",
    "Ironbridge",
    "Juniper",
    "Kingsport",
    "Lakemont",
    "Millbrook",
    "Northgate",
    "Oakridge",
    "Pinecrest",
    "Queensbury",
    "Riverton",
    "Stonebridge",
    "Thornbury",
)
COUNTRIES = (
    "Brazil",
    "Canada",
    "France",
    "Germany",
    "India",
    "Italy",
    "Japan",
    "Kenya",
    "Mexico",
    "Nigeria",
    "Spain",
    "Sweden",
    "United Kingdom",
    "United States",
)
ADJECTIVES = (
    "Silent",
    "Golden",
    "Hidden",
    "Broken",
    "Crimson",
    "Distant",
    "Electric",
    "Frozen",
    "Gentle",
    "Hollow",
    "Iron",
    "Lonely",
    "Midnight",
    "Northern",
    "Painted",
    "Quiet",
    "Restless",
    "Scarlet",
    "Velvet",
    "Wild",
    "Burning",
    "Last",
)
NOUNS = (
    "River",
    "Garden",
    "Horizon",
    "Empire",
    "Harbor",
    "Signal",
    "Forest",
    "Mirror",
    "Voyage",
    "Kingdom",
    "Shadow",
    "Summer",
    "Engine",
    "Orchard",
    "Storm",
    "Compass",
    "Lantern",
    "Valley",
    "Circuit",
    "Tide",
    "Canyon",
    "Letter",
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def person(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return f"{rng.choice(FIRST_NAMES)} {rng.choice('ABCDEFGHJKLMNPRSTW')}. {rng.choice(LAST_NAMES)}"
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def unique(rng: random.Random, n: int, make: Callable[[random.Random], str]) -> list[str]:
    """``n`` distinct strings from ``make``: a collision draws again; only when the space
    is nearly exhausted does a numbered suffix break it."""
    seen: set[str] = set()
    out = []
    for _ in range(n):
        name = make(rng)
        for _attempt in range(50):
            if name not in seen:
                break
            name = make(rng)
        suffix = 2
        base = name
        while name in seen:
            name, suffix = f"{base} {suffix}", suffix + 1
        seen.add(name)
        out.append(name)
    return out


def title(rng: random.Random) -> str:
    pattern = rng.randrange(3)
    if pattern == 0:
        return f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    if pattern == 1:
        return f"{rng.choice(NOUNS)} of the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    return f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"


def date_between(rng: random.Random, start: dt.date, end: dt.date) -> dt.date:
    return start + dt.timedelta(days=rng.randrange((end - start).days + 1))


def fmt_date(day: dt.date, style: str, rng: random.Random | None = None) -> str:
    """Render a date as stored text: ``iso``, ``iso_dt`` (needs rng for the time), ``dmy``,
    ``mdy`` or ``long`` ("March 05, 2011")."""
    if style == "iso":
        return day.isoformat()
    if style == "iso_dt":
        hour, minute, sec = (rng.randrange(8, 20), rng.randrange(60), rng.randrange(60)) if rng else (12, 0, 0)
        return f"{day.isoformat()} {hour:02d}:{minute:02d}:{sec:02d}"
    if style == "dmy":
        return f"{day.day:02d}/{day.month:02d}/{day.year:04d}"
    if style == "mdy":
        return f"{day.month:02d}/{day.day:02d}/{day.year:04d}"
    if style == "long":
        return f"{MONTHS[day.month - 1]} {day.day:02d}, {day.year:04d}"
    raise ValueError(f"unknown date style {style!r}; use iso, iso_dt, dmy, mdy or long")


def noisy_pick(rng: random.Random, canonical: str, variants: Mapping[str, tuple[str, ...]], p: float) -> str:
    """The canonical spelling, or with probability ``p`` one of its stored variants."""
    options = variants.get(canonical, ())
    if options and rng.random() < p:
        return rng.choice(options)
    return canonical


def maybe_null(rng: random.Random, value: object, p: float) -> object:
    return None if rng.random() < p else value


def weighted(rng: random.Random, items: Sequence[str], weights: Sequence[float]) -> str:
    return rng.choices(items, weights=weights, k=1)[0]
