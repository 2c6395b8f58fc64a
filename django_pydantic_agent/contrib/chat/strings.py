"""The strings the chat page's scripts show, marked for translation.

``makemessages`` finds them here; the template hands their translations to the scripts as JSON
(``agent-chat-strings``), where ``t("...")`` in ``modules/util.js`` looks them up.
"""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

#: Every msgid the scripts pass to ``t()``, in English.
MSGIDS: tuple[str, ...] = (
    gettext_noop("Retry"),
    gettext_noop("Too many requests."),
    gettext_noop("The server is busy."),
    gettext_noop("Try again in a moment."),
    gettext_noop("Try again in {seconds} s."),
    gettext_noop("The server refused the message: {why}"),
    gettext_noop("You are offline: try again when the connection is back."),
    gettext_noop("The message was not sent: {why}"),
    gettext_noop("Something went wrong: {why}"),
    gettext_noop("Delete “{title}”? This cannot be undone."),
    gettext_noop("Could not switch branches: {why}"),
    gettext_noop("Could not fork the conversation: {why}"),
    gettext_noop("Could not save your feedback: {why}"),
    gettext_noop("Good answer"),
    gettext_noop("Bad answer"),
    gettext_noop("Branch {index} of {count}"),
    gettext_noop("Assistant"),
    gettext_noop("Attachments"),
    gettext_noop("Branches"),
    gettext_noop("Cancel"),
    gettext_noop("Copied"),
    gettext_noop("Copy"),
    gettext_noop("Copy code"),
    gettext_noop("Copy message"),
    gettext_noop("Copy failed"),
    gettext_noop("Could not stop the answer; try again."),
    gettext_noop("Delete"),
    gettext_noop("Done"),
    gettext_noop("Edit"),
    gettext_noop("Edit message"),
    gettext_noop("Error"),
    gettext_noop("Fork"),
    gettext_noop("Fork from this message"),
    gettext_noop("Interrupted"),
    gettext_noop("New title"),
    gettext_noop("Next branch"),
    gettext_noop("No conversations yet."),
    gettext_noop("Previous branch"),
    gettext_noop("Reconnecting…"),
    gettext_noop("Regenerate"),
    gettext_noop("Regenerate answer"),
    gettext_noop("Remove"),
    gettext_noop("Rename"),
    gettext_noop("Save"),
    gettext_noop("Stop the answer before deleting this conversation."),
    gettext_noop("Stopped"),
    gettext_noop("Stopped."),
    gettext_noop("Stopping…"),
    gettext_noop("The connection closed before the run finished."),
    gettext_noop("The run failed."),
    gettext_noop("The tool refused this call; the model was told why."),
    gettext_noop("This tool call failed."),
    gettext_noop("This tool call was not allowed to run."),
    gettext_noop("denied"),
    gettext_noop("refused"),
    gettext_noop("Thinking (stopped)"),
    gettext_noop("Thinking…"),
    gettext_noop("This answer failed."),
    gettext_noop("This answer was stopped before it finished."),
    gettext_noop("Thought process"),
    gettext_noop("Type a title, or press Cancel."),
    gettext_noop("Untitled conversation"),
    gettext_noop("Waiting for an answer"),
    gettext_noop("Waiting for the agent…"),
    gettext_noop("Writing…"),
    # The thread drawer: search, archive, pages; the export of the open conversation.
    gettext_noop("Archive"),
    gettext_noop("Unarchive"),
    gettext_noop("No conversations match “{query}”."),
    gettext_noop("No archived conversations."),
    gettext_noop("Scroll for more."),
    gettext_noop("Matches for “{query}”: {count}."),
    gettext_noop("Archived conversations: {count}."),
    gettext_noop("Conversations: {count}."),
    gettext_noop("More conversations shown: {count}."),
    gettext_noop("Could not archive “{title}”:"),
    gettext_noop("“{title}” archived."),
    gettext_noop("“{title}” is back in your conversations."),
    gettext_noop("Could not export: {why}"),
)


def catalogue() -> dict[str, str]:
    """Each msgid's translation into the active language."""
    return {msgid: gettext(msgid) for msgid in MSGIDS}
