//! `hangar-bench-copy-grpc`: the floor of one hop read by a gRPC client. Serves one gRPC call on
//! a loopback port it prints (`127.0.0.1:PORT`), whatever the call asks, and answers it with its
//! standard input as the stream of envd's `process.Start`: each read of up to 64 KiB (hangar-envd's
//! read size) becomes one data event, sent as it arrives, then an end event at end of file.
//!
//! Nothing in user space copies the bytes: a read lands behind room left for the message's
//! prefix (the gRPC frame's five bytes and the three protobuf tags and lengths around the data),
//! the prefix is written into that room, and the whole goes to HTTP/2 as one buffer. One
//! thread, as the byte copier (`hangar-bench-copy`). Any daemon serving a pipe to a gRPC client
//! does at least this, so the bench sets hangar's `Start` stream beside it, read by the same
//! client.
use std::{io, os::fd::AsFd, process::ExitCode};

use bytes::{Bytes, BytesMut};
use hangar_proto::process::{
    process_event::{EndEvent, Event},
    ProcessEvent, StartResponse,
};
use prost::Message as _;
use tokio::{io::AsyncReadExt as _, net::TcpListener};

/// hangar-envd's read size.
const READ: usize = 64 * 1024;
/// Room for the longest prefix of a message carrying at most [`READ`] bytes.
const ROOM: usize = 32;

fn main() -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hangar-bench-copy-grpc: starting a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hangar-bench-copy-grpc: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    let (sock, _) = listener.accept().await?;
    sock.set_nodelay(true)?;
    let mut conn = h2::server::handshake(sock).await?;
    let (_request, mut respond) = conn.accept().await.ok_or("the client closed before its call")??;
    // The connection is driven beside the response: it sends what the stream queues and takes
    // the client's window updates.
    let driver = tokio::spawn(async move { futures::future::poll_fn(|cx| conn.poll_closed(cx)).await });
    let head = http::Response::builder().header("content-type", "application/grpc").body(())?;
    let mut send = respond.send_response(head, false)?;
    // The descriptor itself, read without a thread of its own.
    let stdin = io::stdin().as_fd().try_clone_to_owned()?;
    let mut input = tokio::net::unix::pipe::Receiver::from_owned_fd(stdin)?;
    loop {
        let mut buf = BytesMut::with_capacity(ROOM + READ);
        buf.resize(ROOM, 0);
        if input.read_buf(&mut buf).await? == 0 {
            break;
        }
        let n = buf.len() - ROOM;
        let prefix = data_prefix(n);
        let at = ROOM - prefix.len();
        buf[at..ROOM].copy_from_slice(&prefix);
        send_all(&mut send, buf.freeze().slice(at..)).await?;
    }
    let end = StartResponse {
        event: Some(ProcessEvent { event: Some(Event::End(EndEvent { exited: true, ..Default::default() })) }),
    };
    send_all(&mut send, framed(&end.encode_to_vec())).await?;
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    send.send_trailers(trailers)?;
    driver.await??;
    Ok(())
}

/// Sends `data` as the client's window allows: never more than it granted, so the copier holds
/// one read at a time, as hangar-envd's stream does.
async fn send_all(send: &mut h2::SendStream<Bytes>, mut data: Bytes) -> Result<(), h2::Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = match futures::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Reason::CANCEL.into()),
        };
        let part = data.split_to(granted.min(data.len()));
        send.send_data(part, false)?;
    }
    Ok(())
}

/// A gRPC frame: uncompressed, then the message's length.
fn framed(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// What goes before `n` bytes of stdout for them to be a gRPC frame holding
/// `StartResponse { event: ProcessEvent { data: DataEvent { stdout } } }`.
fn data_prefix(n: usize) -> Vec<u8> {
    // Inside out: each layer is its tag, its length, and the layer inside it.
    let data_event = 1 + varint_len(n) + n; // DataEvent.stdout = 1
    let process_event = 1 + varint_len(data_event) + data_event; // ProcessEvent.data = 2
    let start_response = 1 + varint_len(process_event) + process_event; // StartResponse.event = 1
    let mut p = Vec::with_capacity(ROOM);
    p.push(0);
    p.extend_from_slice(&(start_response as u32).to_be_bytes());
    for (tag, len) in [(0x0a, process_event), (0x12, data_event), (0x0a, n)] {
        p.push(tag);
        prost::encoding::encode_varint(len as u64, &mut p);
    }
    p
}

fn varint_len(n: usize) -> usize {
    prost::encoding::encoded_len_varint(n as u64)
}

#[cfg(test)]
mod tests {
    use hangar_proto::process::process_event::data_event::Output;

    use super::*;

    /// The prefix and the bytes decode as the data event tonic would have encoded.
    #[test]
    fn a_prefixed_read_is_a_start_responses_data_event() {
        for n in [1, 127, 128, 16_383, 16_384, READ] {
            let data = vec![7u8; n];
            let mut frame = data_prefix(n);
            assert!(frame.len() <= ROOM, "prefix of {} bytes for {n}", frame.len());
            frame.extend_from_slice(&data);
            let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
            assert_eq!((frame[0], len), (0, frame.len() - 5), "the gRPC frame's header for {n}");
            let msg = StartResponse::decode(&frame[5..]).expect("a StartResponse");
            let event = msg.event.and_then(|e| e.event);
            let Some(Event::Data(d)) = event else { panic!("not a data event: {event:?}") };
            assert_eq!(d.output, Some(Output::Stdout(data.into())), "the stdout bytes for {n}");
        }
    }
}
