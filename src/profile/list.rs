//! A list key of a profile file as written: an array replaces the parent's list, a table
//! `{ add = [...] }` adds to it (the parent's entries, then the added ones not already there).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// One list key of one profile file, or of a chain merged so far.
#[derive(Debug, Clone, PartialEq)]
pub enum ListFile<T> {
    /// `key = [...]`: these, whatever the parent says.
    Replace(Vec<T>),
    /// `key = { add = [...] }`: the parent's (or the default) plus these.
    Add(Vec<T>),
}

impl<T: PartialEq> ListFile<T> {
    /// This file's list over its parent's: an `add` joins the parent's, keeping its kind (a
    /// chain of adds down to the default stays an add, resolved against the default).
    pub fn over(self, parent: Option<ListFile<T>>) -> ListFile<T> {
        match (self, parent) {
            (ListFile::Add(added), Some(ListFile::Replace(base))) => {
                ListFile::Replace(joined(base, added))
            }
            (ListFile::Add(added), Some(ListFile::Add(base))) => ListFile::Add(joined(base, added)),
            (own, _) => own,
        }
    }

    /// The list a profile gets: a replacement as written, an add on top of `default`.
    pub fn resolve(this: Option<ListFile<T>>, default: impl FnOnce() -> Vec<T>) -> Vec<T> {
        match this {
            None => default(),
            Some(ListFile::Replace(v)) => v,
            Some(ListFile::Add(added)) => joined(default(), added),
        }
    }
}

/// `base`, then each of `added` that is not already in it (nor earlier in `added`).
fn joined<T: PartialEq>(mut base: Vec<T>, added: Vec<T>) -> Vec<T> {
    for a in added {
        if !base.contains(&a) {
            base.push(a);
        }
    }
    base
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListFile<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = ListFile<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "an array (replaces the parent's list) or a table { add = [...] } (adds to it)",
                )
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(ListFile::Replace)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut add = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "add" {
                        return Err(de::Error::unknown_field(&key, &["add"]));
                    }
                    if add.is_some() {
                        return Err(de::Error::duplicate_field("add"));
                    }
                    add = Some(map.next_value::<Vec<T>>()?);
                }
                add.map(ListFile::Add)
                    .ok_or_else(|| de::Error::missing_field("add"))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ListFile::{Add, Replace};

    #[test]
    fn adds_join_in_order_without_duplicates() {
        let p = Some(Replace(vec![1, 2, 3]));
        assert_eq!(
            Add(vec![3, 4, 4, 5]).over(p.clone()),
            Replace(vec![1, 2, 3, 4, 5])
        );
        assert_eq!(Replace(vec![9]).over(p), Replace(vec![9]));
        let chain = Add(vec![7]).over(Some(Add(vec![6])));
        assert_eq!(ListFile::resolve(Some(chain), || vec![1, 6]), vec![1, 6, 7]);
        assert_eq!(ListFile::<u8>::resolve(None, || vec![1]), vec![1]);
    }
}
