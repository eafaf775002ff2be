//! Files: paths for a user, entry info, file operations. (Being written.)
