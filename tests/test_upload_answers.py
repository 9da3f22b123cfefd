"""The file chooser's upload URLs survive a script run that starts before they are sent
(uploads.keep_file_url_answers): Streamlit's session queue keeps them through the clear of a new
script run, in order, after what the clear keeps; a queue flushed or cleared for good drops them."""

from __future__ import annotations

from gpuscope.web.uploads import keep_file_url_answers
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.runtime.forward_msg_queue import ForwardMsgQueue


def answer(response_id: str) -> ForwardMsg:
    msg = ForwardMsg()
    msg.file_urls_response.response_id = response_id
    return msg


def delta(text: str, path: list[int]) -> ForwardMsg:
    msg = ForwardMsg()
    msg.metadata.delta_path[:] = path
    msg.delta.new_element.markdown.body = text
    return msg


def finished() -> ForwardMsg:
    msg = ForwardMsg()
    msg.script_finished = ForwardMsg.FINISHED_SUCCESSFULLY
    return msg


def kinds(queue: ForwardMsgQueue) -> list[str]:
    return [str(m.WhichOneof("type")) for m in queue.flush()]


def test_a_new_script_run_keeps_the_unsent_upload_urls() -> None:
    assert keep_file_url_answers() and keep_file_url_answers()  # idempotent
    q = ForwardMsgQueue()
    for m in (delta("a", [0, 0]), answer("r1"), finished(), delta("b", [0, 1]), answer("r2")):
        q.enqueue(m)
    q.clear(retain_lifecycle_msgs=True)  # a script run starts: the old run's deltas go
    msgs = q.flush()
    assert [m.WhichOneof("type") for m in msgs] == [
        "script_finished",
        "file_urls_response",
        "file_urls_response",
    ]
    assert [m.file_urls_response.response_id for m in msgs[1:]] == ["r1", "r2"]
    # the same clear as a fragment's run keeps them too; kept once, not twice
    q.enqueue(answer("r3"))
    q.enqueue(delta("c", [0, 2]))
    q.clear(retain_lifecycle_msgs=True, fragment_ids_this_run=["f"])
    assert kinds(q).count("file_urls_response") == 1
    # a clear for good (the session's end) and a flush drop them
    q.enqueue(answer("r4"))
    q.clear()
    assert kinds(q) == []


def test_a_new_script_run_keeps_a_deferred_download_answer() -> None:
    """The "Download report" button's file (a deferred st.download_button) comes back as a
    backend_operation_response, which a script run starting before the flush must not drop."""
    assert keep_file_url_answers()
    q = ForwardMsgQueue()
    msg = ForwardMsg()
    msg.backend_operation_response.request_id = "d1"
    q.enqueue(delta("a", [0, 0]))
    q.enqueue(msg)
    q.clear(retain_lifecycle_msgs=True)
    msgs = q.flush()
    assert [m.WhichOneof("type") for m in msgs] == ["backend_operation_response"]
    assert msgs[0].backend_operation_response.request_id == "d1"
