//! inotify directory watches. (Being written.)
