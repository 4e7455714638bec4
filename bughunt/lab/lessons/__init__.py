"""One module per lesson, named by number and topic (`l05_torn_writes`), each exporting one
`Lesson` record (`bughunt.lab.registry`): the lesson's experiments as DataFrames, its figures, its
panel, its exercises and quiz. The registry finds them here by name; nothing else lists them."""
