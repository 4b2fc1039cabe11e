"""`precast dataset`: point-in-time training sets from the topics (docs/sre.md, "Learn from
outcomes")."""
