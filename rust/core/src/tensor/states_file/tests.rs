//! Tests of the `.states` codec.

use super::*;
use crate::DType;

fn arr(shape: &[usize], start: f32) -> NDArray {
    let n = shape.iter().product::<usize>();
    NDArray::from_vec(shape, (0..n).map(|i| i as f32 + start).collect()).unwrap()
}

/// Equal states: same structure, and arrays with equal shape, dtype and bytes.
fn same(a: &State, b: &State) -> bool {
    match (a, b) {
        (State::None, State::None) => true,
        (State::Array(x), State::Array(y)) => {
            x.shape() == y.shape() && x.dtype() == y.dtype() && x.to_le_bytes() == y.to_le_bytes()
        }
        (State::Tuple(x), State::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => false,
    }
}

fn err(bytes: &[u8]) -> String {
    decode(bytes, "t.states").unwrap_err().to_string()
}

#[test]
fn round_trip_of_every_state_shape() {
    let mut st = OptStates::new();
    st.insert(0, State::Array(arr(&[3, 4], 0.0)));
    st.insert(1, State::None);
    st.insert(
        2,
        State::Tuple(vec![State::Array(arr(&[2], 1.0)), State::None]),
    );
    st.insert(3, State::Tuple(vec![]));
    st.insert(
        300,
        State::Tuple(vec![
            State::None,
            State::Tuple(vec![State::Array(arr(&[1], 2.0))]),
            State::Array(NDArray::zeros(&[2, 2], DType::Float64)),
            State::Array(NDArray::ones(&[3], DType::Int32)),
        ]),
    );
    st.insert(70_000, State::Array(arr(&[17_000], 3.0))); // > 64 KiB: outside frames
    st.insert(1 << 40, State::Array(NDArray::ones(&[], DType::Float32))); // LONG1; a V3 record
    let bytes = encode(&st);
    let back = decode(&bytes, "t.states").unwrap();
    assert_eq!(
        back.keys().collect::<Vec<_>>(),
        st.keys().collect::<Vec<_>>()
    );
    for (k, v) in &st {
        assert!(
            same(v, &back[k]),
            "{k}: {} vs {}",
            v.describe(),
            back[k].describe()
        );
    }
    assert_eq!(encode(&back), bytes);
}

#[test]
fn empty_states_are_python_bytes() {
    // pickle.dumps({}, protocol=4): a 3-byte frame gets no FRAME header.
    assert_eq!(encode(&OptStates::new()), b"\x80\x04}\x94.");
    assert!(decode(b"\x80\x04}\x94.", "t.states").unwrap().is_empty());
}

/// The record of the float32 array [5, 6].
const REC56: &[u8] = b"\xc9\xfa\x93\xf9\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xa0@\x00\x00\xc0@";

#[test]
fn protocols_3_and_5_read() {
    // pickle.dumps(({0: None, 1: (None,), 5: nd}, None), protocol=3 and 5), nd an NDArray
    // of REC56: GLOBAL text and BINPUT (3), BYTEARRAY8 (5); states with an optimizer part.
    let mut p3 = b"\x80\x03}q\x00(K\x00NK\x01N\x85q\x01K\x05cmxnet.ndarray.ndarray\nNDArray\nq\x02h\x01Rq\x03}q\x04X\x06\x00\x00\x00handleq\x05cbuiltins\nbytearray\nq\x06C(".to_vec();
    p3.extend(REC56);
    p3.extend(b"q\x07\x85q\x08Rq\tsbuN\x86q\n.");
    let mut p5 = b"\x80\x05\x95y\x00\x00\x00\x00\x00\x00\x00}\x94(K\x00NK\x01N\x85\x94K\x05\x8c\x15mxnet.ndarray.ndarray\x94\x8c\x07NDArray\x94\x93\x94h\x01R\x94}\x94\x8c\x06handle\x94\x96(\x00\x00\x00\x00\x00\x00\x00".to_vec();
    p5.extend(REC56);
    p5.extend(b"\x94sbuN\x86\x94.");
    for p in [p3, p5] {
        let st = decode(&p, "t.states").unwrap();
        assert_eq!(st.len(), 3);
        assert!(matches!(st[&0], State::None));
        assert!(matches!(&st[&1], State::Tuple(v) if matches!(v[..], [State::None])));
        let State::Array(a) = &st[&5] else {
            panic!("{}", st[&5].describe())
        };
        assert_eq!(a.to_f64_vec(), vec![5.0, 6.0]);
    }
}

#[test]
fn foreign_globals_and_calls_are_refused() {
    // pickle.dumps({0: os.system}, protocol=4 and 2) on Linux
    let e = err(b"\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00}\x94K\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94s.");
    let want = "t.states: at byte 32: the pickle references posix.system; \
                a .states file may only hold MXNet NDArrays, tuples and None";
    assert!(e.starts_with(want), "{e}");
    let e = err(b"\x80\x02}q\x00K\x00cposix\nsystem\nq\x01s.");
    assert!(
        e.contains("at byte 7: the pickle references posix.system"),
        "{e}"
    );
    // (states, optimizer object): the optimizer's class is a foreign global
    let e = err(b"\x80\x04}\x8c\x19mxnet.optimizer.optimizer\x8c\x03SGD\x93)\x81\x86.");
    let want = "mxnet.optimizer.optimizer.SGD; a .states file may only hold MXNet NDArrays, \
                tuples and None; this file also holds the optimizer object";
    assert!(e.contains(want), "{e}");
    // an allowed class called the wrong way, and calling what is no class
    let e = err(b"\x80\x04\x8c\x08builtins\x8c\x09bytearray\x93K\x01\x85R.");
    assert!(
        e.contains("at byte 27: unexpected call bytearray(int)"),
        "{e}"
    );
    let e = err(b"\x80\x04\x8c\x15mxnet.ndarray.ndarray\x8c\x07NDArray\x93K\x01\x85R.");
    assert!(e.contains("unexpected call NDArray(int)"), "{e}");
    let e = err(b"\x80\x04K\x01)R.");
    assert!(e.contains("a int called"), "{e}");
    let e = err(b"\x80\x04\x8c\x08builtins\x8c\x09bytearray\x93K\x01R.");
    assert!(e.contains("call arguments are a int, not a tuple"), "{e}");
    // BUILD on anything but an NDArray, or with a state other than {'handle': bytes}
    let e = err(b"\x80\x04})b.");
    assert!(e.contains("BUILD on a dict"), "{e}");
    let nd = b"\x80\x04}K\x00\x8c\x15mxnet.ndarray.ndarray\x8c\x07NDArray\x93N\x85R";
    let e = err(&[&nd[..], b"}bs."].concat());
    assert!(e.contains("must be {'handle': bytearray(record)}"), "{e}");
    let e = err(&[&nd[..], b"}\x8c\x06handleNsbs."].concat());
    assert!(e.contains("an NDArray without data (handle None)"), "{e}");
    let e = err(&[&nd[..], b"s."].concat());
    assert!(
        e.contains("the state of parameter 0: an NDArray that never got its data"),
        "{e}"
    );
}

#[test]
fn malformed_pickles_are_errors() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"",
            "at byte 0: the file ends early (truncated?): an opcode needs 1 bytes, 0 left",
        ),
        (b"\x80\x04}\x94", "at byte 4: the file ends early"),
        (
            b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f}.",
            "a frame of 9223372036854775807 bytes, 2 left",
        ),
        (
            b"\x80\x04B\xff\xff\xff\xff",
            "a bytes object needs 4294967295 bytes, 0 left",
        ),
        (
            b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\xff.",
            "needs 18446744073709551615 bytes",
        ),
        (b"\x80\x04\x8a\x20", "a long needs 32 bytes"),
        (b"\x80\x04cos\nsys", "no end to a global's name"),
        (
            b"\x12\x01\x00\x00",
            "at byte 0: pickle opcode 0x12 is not allowed in a .states file (not a pickle",
        ),
        (b"hello", "memo entry 101 is not defined"),
        (
            b"\x80\x04d.",
            "at byte 2: pickle opcode 0x64 is not allowed",
        ),
        (b"\x80\x07}.", "unsupported pickle protocol 7"),
        (b"\x80\x04s.", "the pickle stack is empty"),
        (b"\x80\x04K\x01K\x02u.", "no MARK"),
        (b"\x80\x04(.", "found a MARK"),
        (b"\x80\x04(K\x01u.", "SETITEMS with an odd number"),
        (b"\x80\x04K\x01K\x02K\x03s.", "SETITEM on a int"),
        (
            b"\x80\x04K\x01.",
            "expected a dict parameter index -> state, the pickle holds a int",
        ),
        (b"\x80\x04}\x8c\x01aNs.", "keyed by name (\"a\")"),
        (
            b"\x80\x04}J\xff\xff\xff\xffNs.",
            "negative parameter index -1",
        ),
        (
            b"\x80\x04}K\x00K\x01s.",
            "the state of parameter 0: a int where",
        ),
        (b"\x80\x04\x8c\x02\xff\xfe.", "a string is not UTF-8"),
    ];
    for (bytes, want) in cases {
        let e = err(bytes);
        assert!(e.starts_with("t.states: "), "{e}");
        assert!(
            e.contains(want),
            "{bytes:?}: {e}\n  expected it to contain: {want}"
        );
    }
}

#[test]
fn bad_records_are_errors() {
    let mut st = OptStates::new();
    st.insert(0, State::Array(arr(&[4], 0.0)));
    let good = encode(&st);
    let at = good
        .windows(4)
        .position(|w| w == [0xc9, 0xfa, 0x93, 0xf9])
        .unwrap();
    let mut bad = good.clone();
    bad[at + 8] = 9; // ndim 9: the record then ends early
    let e = err(&bad);
    assert!(e.contains("(the NDArray record built at byte"), "{e}");
    assert!(e.contains("the file ends early"), "{e}");
    bad[at] = 0x77; // an unknown record magic
    assert!(err(&bad).contains("unknown record magic"), "{}", err(&bad));
    // every truncation of a valid file is an error, never a panic
    for n in 0..good.len() {
        assert!(decode(&good[..n], "t.states").is_err(), "{n}");
    }
}

#[test]
fn reused_objects_cannot_amplify() {
    // One 4 KB record built into a second array through memo references (15 bytes): the
    // decoded data would outgrow the file.
    let mut p = b"\x80\x04}K\x00\x8c\x15mxnet.ndarray.ndarray\x8c\x07NDArray\x93\x94N\x85\x94R}\x8c\x06handle\x94\x8c\x08builtins\x8c\x09bytearray\x93B".to_vec();
    let rec = params_file::encode_record(&NDArray::zeros(&[1000], DType::Float32));
    p.extend((rec.len() as u32).to_le_bytes());
    p.extend(&rec);
    p.extend(b"\x85R\x94sbs"); // {0: nd}, the bytearray in memo 3
    assert_eq!(
        decode(&[&p[..], b"."].concat(), "t.states").unwrap().len(),
        1
    );
    p.extend(b"K\x01h\x00h\x01R}h\x02h\x03sbs.");
    let e = err(&p);
    assert!(
        e.contains("the arrays outgrow the file (records reused)"),
        "{e}"
    );
    // One 4 KB array (memoised) referenced by two parameters: it loads as one array, but
    // saving the states would write it twice — the references count, not the reads.
    let mut p = b"\x80\x04}K\x00\x8c\x15mxnet.ndarray.ndarray\x8c\x07NDArray\x93\x94N\x85\x94R\x94}\x8c\x06handle\x94\x8c\x08builtins\x8c\x09bytearray\x93B".to_vec();
    p.extend((rec.len() as u32).to_le_bytes());
    p.extend(&rec);
    p.extend(b"\x85R\x94sbs"); // {0: nd}, the NDArray in memo 2
    assert_eq!(
        decode(&[&p[..], b"."].concat(), "t.states").unwrap().len(),
        1
    );
    p.extend(b"K\x01h\x02s.");
    let e = err(&p);
    assert!(
        e.contains("reference more array bytes than the file has"),
        "{e}"
    );
    // A tuple tripling through memo references, 15 levels deep: 3^15 states from 70 bytes.
    let mut p = b"\x80\x04}K\x00N".to_vec();
    for j in 0..15u8 {
        p.extend([op::MEMOIZE, op::BINGET, j, op::BINGET, j, op::TUPLE3]);
    }
    p.extend(b"s.");
    let e = err(&p);
    assert!(
        e.contains("more state values than the file has bytes"),
        "{e}"
    );
    // deep nesting is refused before recursion could exhaust the stack
    let mut p = b"\x80\x04}K\x00N".to_vec();
    p.extend([op::TUPLE1; 100_000]);
    p.extend(b"s.");
    assert!(err(&p).contains("tuples nested more than 16 deep"));
}
