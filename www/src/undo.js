// "Deleted … Undo": an action carried out only once the few seconds to undo it have passed. Until then nothing is lost
// (the caller hides what the action removes, and keeps it); one action is pending at a time: a new one, `settle()`
// or the page going away carries out the one before.
const UNDO_MS = 8000;

export class UndoToast {
  #pending = null; // { undo, commit, timer }

  /** `box`: the toast (hidden when nothing can be undone), with a `.text` and an Undo button. */
  constructor(box) {
    this.box = box;
    this.text = box.querySelector('.text');
    box.querySelector('button').onclick = () => this.#end()?.undo();
    window.addEventListener('pagehide', () => this.settle());
  }

  /** Say `text` with an Undo button: `undo()` if it is pressed in time, else `commit()` (which may be async). */
  offer(text, { undo, commit }) {
    this.settle();
    this.#pending = { undo, commit, timer: setTimeout(() => this.settle(), UNDO_MS) };
    this.text.textContent = text;
    this.box.hidden = false;
  }

  /** Carry out the pending action now (before one that must see the store as it will be); resolves once it is done. */
  async settle() {
    await this.#end()?.commit();
  }

  #end() {
    const pending = this.#pending;
    if (!pending) return null;
    this.#pending = null;
    clearTimeout(pending.timer);
    this.box.hidden = true;
    return pending;
  }
}
