"""The lab layer for the notebooks and the app: the views, the thinnest layer of the package.

`registry` lists the lessons (one module each under `lessons/`, one `Lesson` record each); `panel`
is the one base of every lesson's panel; `views`, `judges`, `diagrams`, `plots` and `style` are
what several lessons share; `results` is the one cache of this kernel's measurements; `regen`
builds the notebooks. It starts no process of its own (the experiments below it do, and stop what
they start), and nothing here is imported by the worker."""
