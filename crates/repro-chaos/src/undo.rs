//! The undo stack: what each operation must undo (start a killed target again, thaw, an adapter's undo
//! hook), pushed when its effect is made, taken when its duration ends, and swept newest first when the
//! run ends — after an error or a signal too.
use std::sync::Mutex;

/// One registered undo.
#[derive(Debug, Clone, PartialEq)]
pub struct Undo<A> {
    pub id: u64,
    pub operation: String,
    pub uses: String,
    pub run: u32,
    pub action: A,
}

/// A stack of undos shared by the flow's parallel branches.
pub struct UndoStack<A> {
    inner: Mutex<(u64, Vec<Undo<A>>)>,
}

impl<A> Default for UndoStack<A> {
    fn default() -> Self {
        UndoStack { inner: Mutex::new((0, Vec::new())) }
    }
}

impl<A> UndoStack<A> {
    /// Registers an undo; its id for [`UndoStack::take`].
    pub fn push(&self, operation: &str, uses: &str, run: u32, action: A) -> u64 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let id = g.0;
        g.0 += 1;
        g.1.push(Undo { id, operation: operation.to_string(), uses: uses.to_string(), run, action });
        id
    }

    /// Takes undo `id` off the stack (to run it now); None if the sweep already took it.
    pub fn take(&self, id: u64) -> Option<Undo<A>> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let pos = g.1.iter().position(|u| u.id == id)?;
        Some(g.1.remove(pos))
    }

    /// The newest undo, taken off the stack.
    pub fn pop(&self) -> Option<Undo<A>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).1.pop()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_newest_first_and_taken_undos_are_gone() {
        let s = UndoStack::default();
        let a = s.push("a", "kill", 1, 'a');
        let b = s.push("b", "kill", 1, 'b');
        s.push("c", "freeze", 2, 'c');
        assert_eq!(s.take(b).map(|u| u.action), Some('b'));
        assert_eq!(s.take(b), None, "an undo runs once");
        assert_eq!(s.pop().map(|u| u.action), Some('c'));
        assert_eq!(s.pop().map(|u| (u.id, u.operation)), Some((a, "a".to_string())));
        assert!(s.pop().is_none() && s.is_empty());
    }
}
