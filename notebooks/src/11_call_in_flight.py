# %% [markdown]
# <!-- lesson: header -->
#
# **The question.** The first text names one boundary no checkpoint can cover: a streamed answer
# half received when the process dies has its other half on the server (流式输出到一半，另一半在服务端),
# so the call in flight (正在进行的那一次调用) may have to be redone (重做), or handled on its own
# (单独处理).
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
# [Try it](#Try-it) · [Exercises](#Exercises) · [What to remember](#What-to-remember) ·
# [Common wrong statements](#Common-wrong-statements) ·
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
# append-only bill it alone writes: the lab's stand-in for a provider's invoice. Billing the whole
# answer at arrival is this server's model, the dearest case; section 2 says where a real provider
# may bill less.
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
redo = cif.cached_kill("chunk#5", "redo", True)
cif.kill_table([redo])

# %%
cif.CLAIMS.say("redo_pays_twice")

# %% [markdown]
# The other rule, `--pending abort`, records the call as aborted, with the prefix it held, and does
# not call again (as Codex writes "aborted" for an interrupted tool call and lets the model
# decide):

# %%
abort = cif.cached_kill("chunk#5", "abort", True)
cif.kill_table([abort])

# %%
cif.CLAIMS.say("abort_pays_once")

# %% [markdown]
# Before the sweep, decide one statement: the check below measures it against the server's bill,
# and the sweep then shows every point.

# %%
quiz("Q11.3")

# %%
answer_q11_3 = None
check("Q11.3", answer_q11_3)

# %% [markdown]
# Now every crash point inside the call, with both rules (each a real SIGKILL, each resumed):

# %%
sweep = cif.call_sweep()
cif.plot_kill_sweep(sweep)

# %%
cif.kill_sweep_summary(sweep)

# %%
cif.CLAIMS.say("every_point_costs_the_same", "whole_answer_held_still_paid")

# %% [markdown]
# **Billing at arrival is this server's model, not a provider's rule.** A provider prices by the
# tokens it processes (OpenAI's [pricing](https://openai.com/api/pricing/) is per input and per
# output token), and output tokens exist only once the model has generated them. So a real
# provider may bill a killed stream for the prompt and only the tokens it generated before it
# noticed the client was gone: less than this server's whole answer, and still money for nothing.
# None of OpenAI's pages cited here says how a stream the client dropped is billed. They say that
# the usage of a streamed call comes in a last chunk (`stream_options: {"include_usage": true}`),
# and that "if the stream is interrupted, you may not receive the final usage chunk"
# ([Chat Completions reference, `stream_options`](https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options);
# the same text is in the pinned SDK's `openai/types/chat/chat_completion_stream_options_param.py`);
# and that only a response created with `background=true` can be cancelled
# ([Responses reference, cancel](https://platform.openai.com/docs/api-reference/responses/cancel)):
# a streamed Chat Completion has no cancel call, the client can only close the connection. A
# killed client therefore never learns what it was billed; the provider's usage page is the
# invoice. (That a provider bills what it generated rather than the whole answer is the lab's
# reading of these pages, not a sentence in them.)
#
# Here is the resume's rule, read from the package:

# %%
show_source(inflight._call_or_resume)

# %% [markdown]
# ## 3. What the SDK does by itself
#
# Decide first:

# %%
quiz("Q11.1")

# %%
answer_q11_1 = None
check("Q11.1", answer_q11_1)

# %% [markdown]
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

# %%
cif.CLAIMS.say("sdk_timeout_retries_are_billed", "sdk_refusals_are_not_billed",
               "sdk_cut_stream_is_not_retried", "sdk_cut_body_is_retried",
               "sdk_malformed_chunk_escapes", bullets=True)

# %% [markdown]
# Where this lives in the SDK (the pinned version's source): the retry loop, `_should_retry` and
# `_calculate_retry_timeout` in `openai/_base_client.py`; the stream's parsing (`sse.json()`, a
# plain `json.loads`) in `openai/_streaming.py`; the defaults (2 retries, 0.5 s doubling to at most
# 8 s, a 600 s timeout) in `openai/_constants.py`.

# %% [markdown]
# ### The timeout limits each read, not the whole call
#
# Decide first:

# %%
quiz("Q11.2")

# %%
answer_q11_2 = None
check("Q11.2", answer_q11_2)

# %% [markdown]
# The SDK's timeout is an httpx `Timeout` (the pinned SDK uses `httpx2`, which keeps it): it
# bounds each network operation (connect, write, each read, the pool wait), not the call. A
# stream whose chunks come 0.1 s apart never trips a 0.4 s timeout, however long it runs; one that
# pauses 0.6 s before its first chunk trips a 0.2 s timeout at once, after the retry loop, so it
# is not retried either. The table and the figure below are the same calls as the table above:
# the slow and the stalled stream's chunks, timed as they arrived. (Times vary between runs: these
# cells' outputs are not checked; the sentence under them is checked on every run.)

# %% tags=["nbval-ignore-output"]
cif.sdk_timing(sdk)

# %% tags=["nbval-ignore-output"]
cif.plot_timelines(cif.sdk_timelines(sdk))

# %% tags=["nbval-ignore-output"]
cif.CLAIMS.say("slow_stream_outlives_its_timeout")

# %% [markdown]
# To bound a whole call, put your own deadline around it (and remember that what the deadline cuts
# off was billed).
#
# ### A retry is a new request to the server
#
# Look at the three attempts of the timed-out call as they left the client:

# %%
cif.attempts_table(cif.timed_out_attempts())

# %%
cif.CLAIMS.say("retries_carry_no_key")

# %% [markdown]
# The SDK makes an idempotency key per call and reuses it across retries (`_idempotency_key` in
# `_base_client.py`), but the OpenAI client sends it under no header (`_idempotency_header` is
# `None`). The only difference the server can see is `x-stainless-retry-count`. A server that
# wanted to deduplicate retries has nothing to key on: lesson 4's effectively-once needs the
# receiver to recognise a repeat, and here it cannot.

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

# %%
cif.CLAIMS.say("resume_from_prefix_is_dearer")

# %% [markdown]
# Real providers price output tokens higher than input, which is where resuming can save. And the
# continuation is *a* continuation, not the lost words, unless sampling is deterministic. None of
# the three gets the first call's money back.

# %% [markdown]
# **Lesson 2, granularity.** An agent's natural checkpoint boundaries (天然的检查点边界) are a
# complete model reply and a complete tool result; the call in flight is the one boundary no store
# covers. Lesson 2's finest store (a snapshot after every operation) still redoes a call killed
# after it returned and before it was saved. Inside the call?

# %%
cif.lesson2_contrast()

# %%
cif.CLAIMS.say("finest_store_cannot_cover_the_call")

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

# %%
cif.CLAIMS.say("worker_pays_the_call_in_flight_once", "in_process_figures_are_the_same",
               "witnesses_agree_over_http")

# %% [markdown]
# What the HTTP call costs the lab is time. This cell's times include starting the fork server
# that preloads the SDK, so they vary; `make bench` measures one crash+resume pair over HTTP
# against the in-process model without start-up costs. That ratio is why every other lesson's
# sweep keeps the in-process model. (This cell's output is not checked.)

# %% tags=["nbval-ignore-output"]
cif.worker_timing(worker)

# %% tags=["nbval-ignore-output"]
cif.CLAIMS.say("http_costs_time")

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
# ## Exercises
#
# Each configuration differs from the ones run above (another crash point, retry count or
# fault); what the lesson showed lets you predict it. Predict first, then run the cell below your
# prediction: it runs the experiment and compares.
#
# **11.1** Page 3's streamed call is killed at `chunk#5`; the resume redoes the call and is itself
# killed at `chunk#3` of its own call; a third process resumes with `--pending redo`. How many
# calls does the server bill for page 3, the three processes together?

# %%
prediction_11_1 = None

# %%
check("11.1", prediction_11_1)

# %% [markdown]
# **11.2** The server answers the first three tries of a call with 429 (Retry-After 0.05 s);
# `max_retries` is 2. How many attempts does the server bill for this call?

# %%
prediction_11_2 = None

# %%
check("11.2", prediction_11_2)

# %% [markdown]
# **11.3** A call that is not streamed has its connection cut halfway through the response's body;
# `max_retries` is 1. How many attempts does the server bill?

# %%
prediction_11_3 = None

# %%
check("11.3", prediction_11_3)

# %% [markdown]
# **11.4** A call that is not streamed gets a response whose body is not valid JSON. Does
# `except openai.APIError:` catch what the SDK raises (True or False)?

# %%
prediction_11_4 = None

# %%
check("11.4", prediction_11_4)

# %% [markdown]
# **11.5** A problem drawn for this lesson (`python -m bughunt practice --lesson 11 --seed 9`
# prints the same one; other seeds give others, each a page, a crash point or a fault the lesson
# did not run). Predict, then check: the check runs the experiment.

# %%
cif.TRANSFER

# %%
prediction_11_5 = None        # a number

# %%
check("11.5", prediction_11_5)

# %% [markdown]
# Stuck? `solution("11.1")` prints a worked answer.

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
# This lesson asked its three true-or-false statements where they come up, before the part that
# answers them: Q11.3 before the sweep of section 2, Q11.1 before section 3, Q11.2 before the
# timeout. `solution("Q11.2")` explains one again.

# %% [markdown]
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

# %% [markdown]
# - Billing and usage of a stream: [OpenAI pricing](https://openai.com/api/pricing/) (per input and
#   output token), the [Chat Completions reference](https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options)
#   (`stream_options.include_usage`: an interrupted stream may not deliver its usage chunk), the
#   [Responses reference, cancel](https://platform.openai.com/docs/api-reference/responses/cancel)
#   (only background responses can be cancelled)
# - Codex, an interrupted call recorded as "aborted": [openai/codex](https://github.com/openai/codex)
#
# ---
# <!-- lesson: nav -->
