# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The first text names one boundary no checkpoint can cover: a streamed answer
# half received when the process dies has its other half on the server (流式输出到一半，另一半在服务端),
# so the call in flight (正在进行的那一次调用) must be redone (重做) or handled on its own (单独处理).
# What does that cost, measured on a real server's bill? And what does the `openai` SDK already do
# by itself when a call times out, is refused with a 429, or loses its connection mid-stream?
#
# **Recap.** Lesson 8 ran what the first text left untested: a crash during recovery, two
# resumers, a full disk, power loss. Lesson 2 had already named the one thing an in-process mock
# model cannot show: the call in flight. Here the model is a real server and the client is the
# real SDK.

# %% [markdown]
# <!-- lesson: about -->

# %% [markdown]
# **Contents.**
# [1 The model is a server](#1.-The-model-is-a-server-now) ·
# [2 Killed mid-stream](#2.-Killed-mid-stream) ·
# [3 What the SDK does by itself](#3.-What-the-SDK-does-by-itself) ·
# [4 The choices](#4.-The-choices-for-the-call-in-flight) ·
# [5 The real worker](#5.-The-real-worker,-killed-inside-its-call) ·
# [6 A real local model](#6.-A-real-local-model) ·
# [Try it](#Try-it) · [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) · [Exercises](#Exercises) ·
# [Further reading](#Further-reading) · [Glossary](glossary.md)

# %%
# %matplotlib inline
import pandas as pd

from bughunt import inflight
from bughunt.lab.judges import check, quiz, solution
from bughunt.lab.lessons import l11_call_in_flight as cif
from bughunt.lab.views import show_source

pd.options.display.width = 160
pd.options.display.max_columns = 20
pd.options.display.max_colwidth = 80

# %% [markdown]
# ## 1. The model is a server now
#
# Until now the lab's model was a function inside the worker's process. Here it is
# `python -m bughunt.modelserver`: a separate process speaking OpenAI's Chat Completions API
# (`POST /v1/chat/completions`, streamed as server-sent events), reached by the real `openai`
# SDK with `base_url` pointing at it. Its answers are deterministic (computed from the prompt), and
# it **bills every request when it arrives**, before the first byte of the answer leaves, on an
# append-only bill it alone writes: the witness a provider's invoice is.
#
# `inflight.shared_lab()` starts the server and a small parent process that has imported the SDK
# once and forks one process per call (a fork costs milliseconds, a fresh interpreter about a
# second); both stop with the kernel. One call that nobody kills, and its line on the bill:

# %%
lab = inflight.shared_lab()
clean = cif.clean_call()
print("answer:", clean["reply"])
print("bill line:", clean["bill"])

# %% [markdown]
# One word is one token and one streamed chunk. Page 3's answer has 12 words; the stream carries
# them after a first chunk with only the role, then a chunk with the finish reason and one with the
# usage. The crash points inside the call are the moments the client reaches, in order:

# %%
print(cif.points_of())

# %% [markdown]
# `sent`: the request is on the wire and the headers are back, so the server has billed it, but no
# chunk has arrived. `chunk#k`: k chunks are in. `last_chunk`: the stream has ended and the whole
# answer is in memory, not yet recorded as the answer. The call process journals the prefix it
# holds at every moment, *then* the crash point fires: a real SIGKILL of its own process.
#
# ## 2. Killed mid-stream
#
# Kill page 3's call after 5 chunks, then start a second process on the same journal. Its rule for
# a call it finds in flight is `--pending redo`: send it again.

# %%
redo = cif.kill_page_call("chunk#5", "redo")
print("the killed process held:", repr(redo.prefix_held))
cif.kill_table([redo]).T

# %% [markdown]
# The killed call is on the server's bill (`killed_call_billed`): the server decided the whole
# answer at arrival and charged it, while the client held four words. Those four words are all the
# client will ever have of it: the rest was on the server and the connection is gone. The resume
# paid for the same answer again: **2 calls billed** for one page. The second answer is word for
# word the first (`reply_matches_clean`), because this server is deterministic.
#
# The other rule, `--pending abort`, records the call as aborted, with the prefix it held, and does
# not call again (as Codex writes "aborted" for an interrupted tool call and lets the model
# decide):

# %%
abort = cif.kill_page_call("chunk#5", "abort")
cif.kill_table([abort]).T

# %% [markdown]
# One call billed, and no answer: the agent keeps four words and a record that says aborted. Now
# every crash point inside the call, with both rules (34 kills, each a real SIGKILL, each resumed):

# %%
sweep = cif.kill_sweep()
cif.plot_kill_sweep(sweep)

# %%
table = cif.kill_table(sweep)
table.groupby("pending", sort=False)[["billed_calls", "redone_model_calls", "billed_tokens"]].agg(
    ["min", "max"])

# %% [markdown]
# Every point costs the same: redo pays the whole call twice, abort pays once and keeps a prefix.
# Where the kill falls only changes how much of the answer the client held (the green bars); the
# server charged the whole answer either way (here, at arrival; a real provider may bill only what
# it generated before it noticed the client was gone, which is still money for nothing).
#
# Look at `chunk#13` to `last_chunk`: the journal already held the **whole** answer, yet the redo
# paid again, because the resume treats only a recorded `answer` as done. That is lesson 4's
# danger window in small: the effect (the answer) happened, its record did not. Here is the
# resume's rule, read from the package:

# %%
show_source(inflight._call_or_resume)

# %% [markdown]
# ## 3. What the SDK does by itself
#
# The SDK's README ([openai-python, "Retries"](https://github.com/openai/openai-python#retries)):
# "Certain errors are automatically retried 2 times by default, with a short exponential backoff.
# Connection errors (for example, due to a network connectivity problem), 408 Request Timeout, 409
# Conflict, 429 Rate Limit, and >=500 Internal errors are all retried by default." "Note that
# requests that time out are retried twice by default." And, in the pinned version's "Handling
# errors": "Stream consumption is not automatically retried, because replaying a request could
# duplicate output already delivered to your application."
#
# Each measurement below is one call with the SDK's own rules and nothing of ours around them,
# against one fault the server injects (the request header `X-Bughunt-Fault`). The attempts the
# SDK sent are counted outside it (an httpx event hook); the attempts billed are read from the
# server's bill.

# %%
sdk = cif.sdk_measurements()
cif.sdk_table(sdk)

# %%
cif.plot_sdk(sdk)

# %% [markdown]
# - **timeout** (the server is slower to its first byte than the timeout): 3 attempts, **all 3
#   billed**. Each retry is a new request to the server, and it pays for each.
# - **rate_limit** (429 twice, with `Retry-After`): 3 sent, 1 billed. A refusal costs nothing; the
#   SDK waited as the server asked (`retry-after-ms`, else `Retry-After`, when 0 to 120 s).
# - **cut_stream**: 1 sent, no retry. The SDK's retry loop ends when the response's headers
#   arrive; the stream's body is read later, in your `for chunk in stream`, so a connection lost
#   there reaches you as `openai.APIConnectionError`. The partial answer exists only in what your
#   loop collected.
# - **cut_body** (the same cut, not streamed): the body is read *inside* the retry loop, so it is
#   retried, and billed, 3 times.
# - **malformed_chunk**: `json.JSONDecodeError`, which is **not** an `openai.APIError`: an
#   `except openai.APIError:` around the stream lets it through.
#
# Where this lives in the SDK (the pinned version's source): the retry loop, `_should_retry` and
# `_calculate_retry_timeout` in `openai/_base_client.py`; the stream's parsing (`sse.json()`, a
# plain `json.loads`) in `openai/_streaming.py`; the defaults (2 retries, 0.5 s doubling to at most
# 8 s, a 600 s timeout) in `openai/_constants.py`.

# %% [markdown]
# ### The timeout limits each read, not the whole call
#
# The SDK's timeout is an httpx `Timeout` (the pinned SDK uses `httpx2`, which keeps it): it
# bounds each network operation (connect, write, each read, the pool wait), not the call. A
# stream whose chunks come 0.1 s apart never trips a 0.4 s timeout, however long it runs; one that
# pauses 0.6 s before its first chunk trips a 0.2 s timeout at once, after the retry loop, so it
# is not retried either. (Times vary between runs: this cell's output is not checked.)

# %% tags=["nbval-ignore-output"]
lines = cif.timelines()
display(cif.sdk_timing(sdk))
cif.plot_timelines(lines)

# %% [markdown]
# To bound a whole call, put your own deadline around it (and remember that what the deadline cuts
# off was billed).
#
# ### A retry is a new request to the server
#
# Look at the three attempts of the timed-out call as they left the client:

# %%
cif.attempts_table(cif.attempts_of_a_timed_out_call())

# %% [markdown]
# The same body three times, each billed, and **no idempotency key**: the SDK makes one per call
# and reuses it across retries (`_idempotency_key` in `_base_client.py`), but the OpenAI client
# sends it under no header (`_idempotency_header` is `None`). The only difference the server can
# see is `x-stainless-retry-count`. A server that wanted to deduplicate retries has nothing to key
# on: lesson 4's effectively-once needs the receiver to recognise a repeat, and here it cannot.

# %% [markdown]
# ## 4. The choices for the call in flight
#
# A process killed inside the call leaves a journal that says "this call started, here is what I
# held". Its resume has three honest answers. Redo and abort are measured above (killed at
# `chunk#5`); resuming from the prefix is computed from the measured prefix with the server's own
# token counting, because neither OpenAI's Chat Completions API nor this server continues an
# answer. Anthropic's Messages API does (a final assistant message is "prefilled" and continued),
# and so does vLLM with `continue_final_message`.

# %%
cif.call_choices_table(sweep)

# %% [markdown]
# Resuming from the prefix re-sends the prompt plus the prefix as input, so on this bill (every
# token costs the same) it is dearer than a redo; real providers price output tokens higher than
# input, which is where it can save. And the continuation is *a* continuation, not the lost words,
# unless sampling is deterministic. None of the three gets the first call's money back.

# %% [markdown]
# **Lesson 2, granularity.** An agent's natural checkpoint boundaries (天然的检查点边界) are a
# complete model reply and a complete tool result; the call in flight is the one boundary no store
# covers. Lesson 2's finest store (a snapshot after every operation) still redoes a call killed
# after it returned and before it was saved; inside the call, no store can help at all:

# %%
cif.lesson2_contrast()

# %% [markdown]
# **Lesson 4, the danger window (危险窗口).** Abort is at most once (至多一次): the harness never
# pays twice, and the model decides whether to ask again. Redo is at least once (至少一次): the
# answer arrives, the bill may double. Effectively once (效果上恰好一次) would need an idempotency key
# (幂等键) that the receiver honours, and the SDK sends none. For a plain answer the duplicate is
# only money; for a call with server-side effects (a tool the provider runs), it is lesson 4's
# duplicate report again.
#
# **Lesson 7, the durable runtime.** Its generation task records `{phase: stream, attempt}` before
# sending. If the model request is in flight at a crash (模型请求正在飞), the attempt counts as
# failed, the half answer (半截回答) is kept as an `aborted` entry that is never sent, and after a
# backoff the same messages are sent again; when the retries run out, the turn ends with
# `runFailure`, reason `interrupted`. That is redo with abort's record: at least once on the bill,
# the prefix kept for the reader. For an interrupted tool call, Codex instead tells the model the
# call was aborted (这次调用中止了) and lets it decide: at most once at the harness.

# %% [markdown]
# ## 5. The real worker, killed inside its call
#
# So far the process killed inside the call made one call and nothing else. The agent of lessons 1
# to 8, `python -m bughunt.worker`, takes the same model as a world setting: `--model-url URL`
# makes it ask this server through the SDK, streamed, instead of the in-process model. Its call
# then has three crash points of its own, before `after_model_call`: `call_sent`, `call_chunk3`
# (the role and two words received) and `call_last_chunk`. Each run names itself on the server's
# bill with the SDK's `project` setting (the `OpenAI-Project` header, by which a provider's
# invoice splits usage), so the redone calls of one run are read from the server's bill, and the
# worker keeps what it received in a call journal (`calls.jsonl`), written before each crash
# point fires.
#
# Sweep every crash point of page 3 twice with the lesson's correct design (a log, intents, the
# idempotency key): over HTTP, and with the in-process model every other lesson uses. Each row is
# a real SIGKILL, a resume, and the three witnesses (tracker, memory, rebuild from disk):

# %%
worker = cif.worker_sweep()
cif.worker_table(worker)

# %% [markdown]
# Over HTTP, the three points inside the call cost what `after_model_call` costs: **one call
# redone**, on the server's bill, whatever the worker held. At `call_last_chunk` it held every word,
# and still paid again: the answer was in memory, not in a checkpoint. The store does not see
# inside the call, so it treats the whole call as one step, and the in-process model's figures
# for the points both schemes share are the same. The witnesses agree everywhere: a call in
# flight costs money, not correctness, as long as the report it leads to carries its key.
#
# What the HTTP call costs the lab is time. This cell's times include starting the fork server
# that preloads the SDK, so they vary; `make bench` measures one crash+resume pair over HTTP
# against the in-process model without start-up costs. That ratio is why every other lesson's
# sweep keeps the in-process model. (This cell's output is not checked.)

# %% tags=["nbval-ignore-output"]
cif.worker_timing(worker)

# %% [markdown]
# From a shell: `python -m bughunt sweep --model local-server --points
# p3.call_sent,p3.call_chunk3,p3.call_last_chunk` starts a server of its own, or give
# `--model-url URL --model-bill FILE` for one you started.

# %% [markdown]
# ## 6. A real local model
#
# Ollama, vLLM and llama.cpp's `llama-server` speak the same API. The same call process reaches
# them by changing `base_url` and the model name; nothing else in the lab's client changes:
#
# ```python
# from bughunt.llm import OpenAIModel
# from bughunt.world import Site
# model = OpenAIModel(Site.load(), base_url="http://localhost:11434/v1", model="llama3.2")
# reply, tokens = model.ask(3)
# ```
#
# or from a shell: `python -m bughunt.inflight --base-url http://localhost:11434/v1 --model
# llama3.2 --journal j.jsonl --crash-at chunk#5`, then the same command without `--crash-at`.

# %%
cif.real_servers_table()

# %% [markdown]
# What the lesson loses there: **deterministic answers** (the redone call may answer differently,
# so a resumed run can no longer be compared with a clean one word for word), **the bill** (a local
# server keeps no invoice: count redone calls from your own journal, or from the server's logs),
# and the **injected faults** (a real server ignores `X-Bughunt-Fault`; a proxy such as
# Toxiproxy can cut or slow connections instead). What it keeps: the real SIGKILL, the journal,
# the prefix, and the SDK's behaviour, which does not depend on who answers.

# %% [markdown]
# ## Try it
#
# Choose the crash point inside page 3's call and what the resume does with it; a fault, and how
# many retries the SDK may make; streaming on or off (not streamed, the answer arrives whole, so
# the only point inside the call is `last_chunk`). Each change re-runs what it affects: a kill and
# its resume (two real processes), or one SDK call against the fault. **Reset** forgets every
# result.

# %% tags=["panel", "nbval-ignore-output"]
p = cif.panel()
p.show()

# %% [markdown]
# ## What to remember
#
# - The call in flight is the one boundary no checkpoint covers: a kill inside it leaves the
#   answer on the server (billed) and a prefix in the client. Redo pays again (at least once);
#   abort keeps the prefix and pays nothing more (at most once); resuming from the prefix needs an
#   API that continues an answer, and still pays for both calls.
# - The `openai` SDK retries by itself: a timeout before the headers (each retry billed), a 429
#   (refusals not billed), a body cut when not streaming. It never retries a stream that broke
#   after its headers: that partial answer is only in what your loop collected.
# - `except openai.APIError` does not catch a malformed chunk (`json.JSONDecodeError`).
# - The timeout limits each read, not the call: bound a whole call yourself.
# - The SDK sends no idempotency key: the server cannot tell a retry from a new call.
# - A real local model takes the same code with another `base_url`, but gives up deterministic
#   answers and the bill that judges the run.

# %% [markdown]
# ## Common wrong statements
#
# True or false? Decide first; each check then measures against the server's bill and explains.

# %%
quiz("Q11.1")

# %%
answer_q11_1 = None
check("Q11.1", answer_q11_1)

# %%
quiz("Q11.2")

# %%
answer_q11_2 = None
check("Q11.2", answer_q11_2)

# %%
quiz("Q11.3")

# %%
answer_q11_3 = None
check("Q11.3", answer_q11_3)

# %% [markdown]
# ## Exercises
#
# Predict first, then run the cell below your prediction: it runs the experiment and compares.
#
# **11.1** Page 3's streamed call is killed at `chunk#5`, and the resume redoes it. How many calls
# does the server bill for page 3, both processes together?

# %%
prediction_11_1 = None

# %%
check("11.1", prediction_11_1)

# %% [markdown]
# **11.2** The server takes 0.6 s to its first byte; the SDK's timeout is 0.2 s, `max_retries` 2.
# How many attempts does the server bill for this one call?

# %%
prediction_11_2 = None

# %%
check("11.2", prediction_11_2)

# %% [markdown]
# **11.3** A streamed call's connection is cut after 4 chunks; `max_retries` is 2. How many
# requests does the SDK send?

# %%
prediction_11_3 = None

# %%
check("11.3", prediction_11_3)

# %% [markdown]
# **11.4** The third chunk of a streamed answer is not valid JSON. Does `except openai.APIError:`
# catch what the SDK raises (True or False)?

# %%
prediction_11_4 = None

# %%
check("11.4", prediction_11_4)

# %% [markdown]
# Stuck? `solution("11.1")` prints a worked answer.
#
# ## Further reading
#
# - The SDK: [openai-python README, retries and timeouts](https://github.com/openai/openai-python#retries),
#   its source [`src/openai/_base_client.py`](https://github.com/openai/openai-python/blob/main/src/openai/_base_client.py)
#   and [`src/openai/_streaming.py`](https://github.com/openai/openai-python/blob/main/src/openai/_streaming.py)
# - The API: [Chat Completions reference](https://platform.openai.com/docs/api-reference/chat),
#   [server-sent events (HTML standard)](https://html.spec.whatwg.org/multipage/server-sent-events.html),
#   [`Retry-After` (RFC 9110)](https://www.rfc-editor.org/rfc/rfc9110#field.retry-after)
# - Timeouts: [httpx, fine-tuning the configuration](https://www.python-httpx.org/advanced/timeouts/)
# - Continuing an answer: [Anthropic, prefill Claude's response](https://docs.anthropic.com/en/docs/build-with-claude/prompt-engineering/prefill-claudes-response),
#   [vLLM's OpenAI-compatible server](https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)
#   (`continue_final_message`)
# - Local servers: [Ollama's OpenAI compatibility](https://github.com/ollama/ollama/blob/main/docs/openai.md),
#   [llama.cpp's `llama-server`](https://github.com/ggml-org/llama.cpp/tree/master/tools/server)
# - Codex, an interrupted call recorded as "aborted": [openai/codex](https://github.com/openai/codex)
#
# ---
# <!-- lesson: nav -->
