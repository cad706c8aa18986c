#!/usr/bin/env python3
"""Generates Ferry's demo corpus: simple English stories and a small chat set, from templates.

Everything is produced by this script from the word lists below (written for Ferry), so the
output is free of third-party rights; it is dedicated to the public domain (CC0-1.0).
Deterministic: the same seed gives byte-identical files.

    python3 crates/engine/scripts/make_corpus.py crates/engine/data
"""
import json
import random
import sys
from pathlib import Path

NAMES = ["Tom", "Mia", "Sam", "Lily", "Ben", "Anna", "Max", "Zoe", "Leo", "Ella", "Jack", "Nora"]
ANIMALS = ["dog", "cat", "bird", "fox", "rabbit", "horse", "duck", "frog", "bear", "mouse", "owl", "fish"]
COLORS = ["red", "blue", "green", "yellow", "brown", "white", "black", "pink"]
SIZES = ["little", "big", "small", "tall", "tiny", "old", "young"]
PLACES = ["park", "river", "forest", "garden", "beach", "hill", "farm", "lake", "town", "school"]
THINGS = ["ball", "kite", "book", "hat", "box", "boat", "cake", "apple", "cup", "drum"]
FEELINGS = ["happy", "sad", "tired", "hungry", "excited", "sleepy", "brave", "calm"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "cloudy"]
VERBS_PAST = [("played with", "thing"), ("found", "thing"), ("lost", "thing"), ("made", "thing"), ("saw", "animal"), ("fed", "animal"), ("helped", "animal")]
SOUNDS = {"dog": "barked", "cat": "purred", "bird": "sang", "fox": "yipped", "rabbit": "hopped", "horse": "neighed",
          "duck": "quacked", "frog": "croaked", "bear": "growled", "mouse": "squeaked", "owl": "hooted", "fish": "splashed"}
FACTS = {
    "sky": "blue", "grass": "green", "snow": "white", "sun": "yellow", "night": "dark", "fire": "hot", "ice": "cold",
    "sea": "deep", "honey": "sweet", "lemon": "sour", "rock": "hard", "pillow": "soft",
}
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def obj(r, kind):
    if kind == "thing":
        return a(f"{r.choice(COLORS)} {r.choice(THINGS)}")
    return a(f"{r.choice(SIZES)} {r.choice(ANIMALS)}")


def story(r):
    name = r.choice(NAMES)
    friend = r.choice([n for n in NAMES if n != name])
    animal = r.choice(ANIMALS)
    place = r.choice(PLACES)
    color = r.choice(COLORS)
    thing = r.choice(THINGS)
    s = [f"{name} had a {color} {animal}.",
         f"One {r.choice(WEATHER)} day, {name} and the {animal} went to the {place}."]
    for _ in range(r.randint(2, 5)):
        verb, kind = r.choice(VERBS_PAST)
        who = r.choice([name, friend, f"the {animal}"])
        s.append(f"{who[0].upper() + who[1:]} {verb} {obj(r, kind)}.")
        if r.random() < 0.4:
            s.append(f"The {animal} {SOUNDS[animal]}.")
        if r.random() < 0.3:
            s.append(f"{friend} was {r.choice(FEELINGS)}.")
    s.append(f"{friend} gave {name} {a(thing)}.")
    s.append(f"At the end of the day, {name} felt {r.choice(FEELINGS)} and went home.")
    return " ".join(s)


def chat(r):
    kind = r.randrange(4)
    if kind == 0:
        k = r.choice(list(FACTS))
        q, a = f"What is the {k} like?", f"The {k} is {FACTS[k]}."
    elif kind == 1:
        a_, b_ = r.randint(0, 10), r.randint(0, 10)
        q, a = f"What is {a_} plus {b_}?", f"{a_} plus {b_} is {a_ + b_}."
    elif kind == 2:
        animal = r.choice(ANIMALS)
        q, a = f"What does the {animal} do?", f"The {animal} {SOUNDS[animal]}."
    else:
        n = r.randint(0, 20)
        q, a = f"How do you write {n} in words?", f"{n} is written {NUMBER_WORDS[n]}."
    messages = []
    if r.random() < 0.3:
        messages.append({"role": "system", "content": "You are a kind helper who answers in one short sentence."})
    messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return {"messages": messages}


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    r = random.Random(20261129)
    paras, size = [], 0
    while size < 320_000:
        p = story(r)
        paras.append(p)
        size += len(p) + 2
    (out / "stories.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    with open(out / "chat.jsonl", "w", encoding="utf-8") as f:
        for _ in range(1500):
            f.write(json.dumps(chat(r)) + "\n")


if __name__ == "__main__":
    main()
